import { randomBytes } from 'node:crypto'
import type { Readable } from 'node:stream'
import { WRAPPER_ENV, type Tools } from './bubblewrap.ts'
import { quote } from '../../shared/sh-quote.ts'
import { filterWrap } from './seccomp.ts'
import { spawnDetached, type SpawnedProcess } from './spawner.ts'

/**
 * A root shell started ahead of need, already inside its cgroups, waiting on stdin for the
 * command line it will become. Two costs leave the hot path this way: forking the service
 * (a few ms for a large Node process), and joining cgroups, whose first write after a quiet
 * spell waits for an RCU grace period (measured 2–30 ms here on cgroup v1). A process forked
 * by a parked shell is in the sandbox's cgroups from its first instruction, so there is no race.
 *
 * The shell joins every cgroup.procs file it is given, writes `P` on its control fd, then reads
 * stdin to its end and evaluates it: Node sends one `exec …` line with every argument quoted.
 * A join that fails says why on the control fd instead (the group is gone, say) and exits 125.
 * Given `enter` (nsenter into a running sandbox), it joins, then execs that into a second shell
 * that waits inside the sandbox, as its user, and writes the `P`: entering the sandbox (an exec
 * of nsenter, its setns calls and fork) is then paid while parked, not by the command.
 */
export type Parked = {
  child: SpawnedProcess
  /** Resolves once the shell sits in its cgroups; rejects when it died first. */
  ready: Promise<void>
  /** Control fd (0-based index into child.stdio) the `P` arrived on. */
  ctlFd: number
  /**
   * Replaces the shell by `argv` (keeping stdio; fds above 2 but ctlFd stay open when keepFds),
   * after running `before` in it when given (the shell exits 126 when that fails). With stdinFd,
   * the `passFds` pipes after it become the command's fds 3, 4… (see parkSpawn).
   */
  start(argv: string[], opts?: { keepFds?: boolean; before?: string[] | null; fd9?: string | null; prelude?: string; stdinFd?: number; passFds?: number }): void
  /** True while the shell is waiting and usable. */
  usable(): boolean
}

/**
 * How a parked shell enters the sandbox: a command line prefix run once a host shell joined the
 * cgroups (nsenter), or, given the control fd, one that joins them itself (saving that shell), and
 * says on that fd why it could not.
 */
export type Entry = string[] | ((ctlFd: number) => string[])

const PARK =
  'while [ "$1" != -- ]; do { echo $$ > "$1"; } 2>&"$0" || exit 125; shift; done; shift; [ $# -eq 0 ] || exec "$@"; ' +
  'printf P >&"$0"; s=; while IFS= read -r l || [ -n "$l" ]; do s="$s$l\n"; done; eval "$s"'

/**
 * Parks a shell with stdio: 0 = the script, 1–2 = pipes (the future command's output), then
 * `extraFds` more pipes; the control fd is the last of them. `wrap` runs before the shell and
 * execs it (unshare, say); it must not fork, or its child would start outside the cgroups.
 * `under`: what the spawner that starts it runs under (see SpawnOptions), which the shell inherits.
 */
export function park(sh: string, procsFiles: string[], extraFds: number, wrap: string[] = [], under?: string[], enter: Entry = [], insideSh = sh): Parked {
  const pipes = 3 + Math.max(1, extraFds)
  const ctlFd = pipes - 1
  // Entering, the same script runs again inside with no groups to join (it starts at the `--`),
  // by the sandbox's own shell (an image's root has /bin/sh, not necessarily the host's path of it).
  const inside = [insideSh, '-c', PARK, String(ctlFd), '--']
  const argv =
    typeof enter === 'function'
      ? [...wrap, ...enter(ctlFd), ...inside]
      : [...wrap, sh, '-c', PARK, String(ctlFd), ...procsFiles, '--', ...(enter.length > 0 ? [...enter, ...inside] : [])]
  // Detached: its own session, no terminal to reach, one process group to kill. Root without the
  // service's supplementary groups (libuv calls setgroups(0) for a uid given).
  const child = spawnDetached(argv[0]!, argv.slice(1), { env: WRAPPER_ENV, pipes, uid: 0, gid: 0, under })
  let started = false
  let isReady = false
  /** The control pipe, once every pipe arrived from the spawner. */
  let ctl: Readable | null = null
  let said = ''
  const ready = new Promise<void>((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => {
      const fail = () => {
        // The shell names itself after its control fd (`3: 1: cannot create …`): that part says nothing.
        const why = said.trim().replace(/^\S+: \d+: /, '')
        reject(new Error(`parked shell exited (${code ?? 'signal'}) before it was ready${why ? `: ${why}` : ''}`))
      }
      // Why it gave up may still be in the pipe: read it to its end first.
      if (isReady || !ctl || ctl.destroyed) return fail()
      ctl.once('close', fail)
      const pipe = ctl
      setTimeout(() => pipe.destroy(), 1000).unref()
    })
    child.opened.then(() => {
      const pipe = child.stdio[ctlFd]!
      ctl = pipe
      const onData = (b: Buffer) => {
        if (b[0] !== 0x50) {
          if (said.length < 1000) said += b.toString('utf8', 0, 1000)
          return
        }
        pipe.off('data', onData)
        // Whatever comes next on this fd belongs to the command (bwrap's ready byte, say).
        pipe.pause()
        if (b.length > 1) pipe.unshift(b.subarray(1))
        isReady = true
        resolve()
      }
      pipe.on('data', onData)
    }, reject)
  })
  ready.catch(() => {}) // marks it handled: whoever awaits `ready` gets the failure
  // Paused, it would never see its end and hold its handle for good.
  child.once('exit', () => {
    if (isReady) ctl?.destroy()
  })
  return {
    child,
    ready,
    ctlFd,
    start(argv, opts = {}) {
      if (started) throw new Error('parked shell already started')
      started = true
      const close = opts.keepFds ? '' : ` ${ctlFd}>&-`
      const before = opts.before ? `${opts.before.map(quote).join(' ')} || exit 126; ` : ''
      // Text for fd 9 travels in a here-document on the shell's stdin, never on a command line:
      // a command line is readable by every host user in /proc/<pid>/cmdline.
      // The here-document's body follows the line that opens it.
      const doc = opts.fd9 === undefined || opts.fd9 === null ? { redirect: '', body: '' } : hereDoc(9, opts.fd9)
      // The command reads /dev/null, or (a process the caller talks to) one of the extra pipes.
      const stdin = opts.stdinFd === undefined ? '</dev/null' : `<&${opts.stdinFd}${passed(opts.stdinFd, opts.passFds ?? 0)}`
      child.stdin!.end(`exec ${stdin}${close}${doc.redirect}; ${opts.prelude ?? ''}${before}exec ${argv.map(quote).join(' ')}\n${doc.body}`)
      if (!opts.keepFds) ctl?.destroy()
    },
    usable: () => isReady && !started && child.exitCode === null && child.signalCode === null,
  }
}

/**
 * Redirections that move the `count` fds after `stdinFd` down to 3, 4… and close what is left of
 * them: each move's source is above every fd moved before it, so none is overwritten before it moves.
 */
function passed(stdinFd: number, count: number): string {
  const moves = Array.from({ length: count }, (_, i) => ` ${3 + i}<&${stdinFd + 1 + i}`).join('')
  return `${moves} ${stdinFd + count}<&-`
}

/** A here-document on `fd` whose delimiter cannot occur as a line of the text. */
function hereDoc(fd: number, text: string): { redirect: string; body: string } {
  let end = `WARREN_${randomBytes(9).toString('hex')}`
  while (text.split('\n').includes(end)) end = `WARREN_${randomBytes(9).toString('hex')}`
  return { redirect: ` ${fd}<<'${end}'`, body: `${text}${text.endsWith('\n') || text === '' ? '' : '\n'}${end}\n` }
}


/**
 * A parked shell for a process the caller talks to: stdin on fd 3 (a pipe), then `extraFds` pipes
 * (fds 4…, the command's 3… once started with passFds), control on the last. Like parkExec's,
 * under no_new_privs and the syscall filter.
 */
export function parkSpawn(tools: Tools, procsFiles: string[], extraFds = 0): Parked {
  return park(tools.sh, procsFiles, 2 + extraFds, [], filterWrap(tools.perl))
}

/**
 * A parked shell for one exec call: stdout and stderr pipes, control on fd 3. It is started by a
 * spawner that runs under no_new_privs and the entry filter, which it and everything it starts
 * inherit (setns and the change to the sandbox uid still work under them): loaded once, when
 * that spawner starts, instead of by a perl run for every shell parked. Given `enter` (the
 * sandbox's init runs), it waits inside the sandbox already; its command then needs no nsenter.
 */
export function parkExec(tools: Tools, procsFiles: string[], enter: Entry = [], insideSh = tools.sh): Parked {
  return park(tools.sh, procsFiles, 1, [], filterWrap(tools.perl), enter, insideSh)
}
