import { finished } from 'node:stream/promises'
import { after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Sandbox, SandboxProcess, SandboxSpec } from '../src/sandbox/sandbox.ts'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'
import { filterArch, seccompFilter } from '../src/sandbox/local/seccomp.ts'

/**
 * What the kernel lets a workspace process do, probed from inside real sandboxes: commands (the
 * bash tool and template setup run through exec) and long-lived processes (MCP stdio servers and
 * the browser run through spawn).
 */

const skip = process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap']).status !== 0 ? 'needs bubblewrap' : false
const run = randomBytes(3).toString('hex')
const MiB = 1024 * 1024

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-hardening-test-'))
fs.chmodSync(dataDir, 0o700)
after(() => fs.rmSync(dataDir, { recursive: true, force: true }))

const spec = (id: string): SandboxSpec => ({
  id,
  workspaceMount: '/workspace',
  env: {},
  network: { allow: [] },
  limits: { memoryBytes: 512 * MiB, pids: 256, cpus: 1 },
})

/** Everything a spawned process writes to stdout until it exits. */
async function output(proc: SandboxProcess): Promise<{ code: number | null; out: string }> {
  let out = ''
  proc.stdout.on('data', (b: Buffer) => (out += b.toString('utf8')))
  proc.stderr.on('data', () => {})
  proc.stdin.end()
  // The exit may come before the last of stdout is read (a loaded machine shows it): both, then.
  const [code] = await Promise.all([proc.exited, finished(proc.stdout)])
  return { code, out }
}

/**
 * Syscall numbers of the calls the filter must refuse, written out here from the kernel's tables
 * (asm/unistd_64.h, asm-generic/unistd.h) rather than taken from the code under test.
 */
const REFUSED: Record<'x64' | 'arm64', Record<string, number>> = {
  x64: {
    mount: 165, umount2: 166, pivot_root: 155, open_tree: 428, move_mount: 429, fsopen: 430, fsconfig: 431, fsmount: 432, fspick: 433,
    mount_setattr: 442, keyctl: 250, add_key: 248, request_key: 249, bpf: 321, perf_event_open: 298, userfaultfd: 323,
    io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427, kexec_load: 246, kexec_file_load: 320,
    open_by_handle_at: 304, name_to_handle_at: 303, init_module: 175, finit_module: 313, delete_module: 176, reboot: 169,
    swapon: 167, swapoff: 168, settimeofday: 164, clock_settime: 227, clock_adjtime: 305, acct: 163, quotactl: 179, syslog: 103,
    iopl: 172, ioperm: 173, fanotify_init: 300,
    // Reaching into another process, memory placement, the host's names: an allowlist leaves them out.
    pidfd_getfd: 438, kcmp: 312, process_madvise: 440, mbind: 237, set_mempolicy: 238, get_mempolicy: 239, migrate_pages: 256,
    move_pages: 279, set_mempolicy_home_node: 450, sethostname: 170, setdomainname: 171, vhangup: 153, uselib: 134, ustat: 136,
    sysfs: 139, _sysctl: 156, lookup_dcookie: 212,
  },
  arm64: {
    mount: 40, umount2: 39, pivot_root: 41, open_tree: 428, move_mount: 429, fsopen: 430, fsconfig: 431, fsmount: 432, fspick: 433,
    mount_setattr: 442, keyctl: 219, add_key: 217, request_key: 218, bpf: 280, perf_event_open: 241, userfaultfd: 282,
    io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427, kexec_load: 104, kexec_file_load: 294,
    open_by_handle_at: 265, name_to_handle_at: 264, init_module: 105, finit_module: 273, delete_module: 106, reboot: 142,
    swapon: 224, swapoff: 225, settimeofday: 170, clock_settime: 112, clock_adjtime: 266, acct: 89, quotactl: 60, syslog: 116,
    fanotify_init: 262,
    pidfd_getfd: 438, kcmp: 272, process_madvise: 440, mbind: 235, get_mempolicy: 236, set_mempolicy: 237, migrate_pages: 238,
    move_pages: 239, set_mempolicy_home_node: 450, sethostname: 161, setdomainname: 162, vhangup: 58, lookup_dcookie: 18,
  },
}
const CALLS = {
  x64: { clone: 56, clone3: 435, unshare: 272, getpid: 39, setns: 308, chroot: 161, ptrace: 101, socket: 41, personality: 135 },
  arm64: { clone: 220, clone3: 435, unshare: 97, getpid: 172, setns: 268, chroot: 51, ptrace: 117, socket: 198, personality: 92 },
}
/** The first number past the kernel's table as the filter knows it (open_tree_attr is 467 on both). */
const PAST_TABLE = 468
const X32_BIT = 0x40000000
const AF = { UNIX: 1, INET: 2, INET6: 10, NETLINK: 16, ALG: 38, VSOCK: 40, PACKET: 17 }
const SOCK_STREAM = 1
/** personality(2) flags Docker refuses: ADDR_NO_RANDOMIZE (turns ASLR off), READ_IMPLIES_EXEC. */
const ODD_PERSONALITIES = { ADDR_NO_RANDOMIZE: 0x40000, READ_IMPLIES_EXEC: 0x400000 }
const CLONE_NEWUSER = 0x10000000
const CLONE_NEWNS = 0x20000
const CLONE_NEWNET = 0x40000000
const SIGCHLD = 17

/** The value of one field of /proc/self/status, as seen by whoever printed the file. */
const field = (status: string, name: string) => status.match(new RegExp(`^${name}:\\s*(\\S+)`, 'm'))?.[1]

describe('workspace processes and the kernel', { skip }, () => {
  const provider = new LocalSandboxProvider({
    cgroupParent: 'warren-test',
    workspaceRoot: dataDir,
    prefix: `t${run}-hard-`,
    uidBase: 300_000 + (randomBytes(2).readUInt16BE() % 600) * 100,
    uidCount: 20,
  })
  let sb: Sandbox
  after(async () => {
    await sb?.destroy()
    await provider.close()
  })

  it('runs commands and spawned processes with no_new_privs', async () => {
    sb = await provider.create(spec('nnp'))
    // Twice: the first command may run on a shell parked at create, the second on a refill.
    for (let i = 0; i < 2; i++) {
      const r = await sb.exec({ command: 'cat /proc/self/status' })
      assert.equal(r.exitCode, 0, r.stderr.toString())
      assert.equal(field(r.stdout.toString(), 'NoNewPrivs'), '1', `command ${i + 1}`)
    }
    const spawned = await output(await sb.spawn({ command: 'cat /proc/self/status' }))
    assert.equal(spawned.code, 0)
    assert.equal(field(spawned.out, 'NoNewPrivs'), '1', 'a spawned process (MCP server, browser)')
    // And what they start inherits it: a background process found from a later command.
    await sb.exec({ command: '(setsid sleep 30 >/dev/null 2>&1 &)' })
    const bg = await sb.exec({ command: 'for p in $(pgrep -x sleep); do grep NoNewPrivs /proc/$p/status; done | sort -u' })
    assert.equal(bg.stdout.toString().trim().split('\n').map((l) => l.split(/\s+/)[1]).join(','), '1')
  })

  it('runs every process under the syscall filter, the init too, and refuses a user namespace of its own', async () => {
    sb ??= await provider.create(spec('nnp'))
    for (let i = 0; i < 2; i++) {
      const r = await sb.exec({ command: 'cat /proc/self/status' })
      assert.equal(field(r.stdout.toString(), 'Seccomp'), '2', `command ${i + 1}`)
    }
    const spawned = await output(await sb.spawn({ command: 'cat /proc/self/status' }))
    assert.equal(field(spawned.out, 'Seccomp'), '2', 'a spawned process (MCP server, browser)')
    const init = await sb.exec({ command: 'cat /proc/1/status' })
    assert.equal(field(init.stdout.toString(), 'Seccomp'), '2', 'the init, whose namespaces commands join')
    const userns = await sb.exec({ command: 'unshare -U -r true' })
    assert.notEqual(userns.exitCode, 0, 'unshare -U -r succeeded')
    assert.match(userns.stderr.toString(), /Operation not permitted/)
  })

  it('starts the shells that join the sandbox from a helper already under the filter, not a perl for each shell', async () => {
    sb ??= await provider.create(spec('nnp'))
    const marker = `joined-${randomBytes(4).toString('hex')}`
    const proc = await sb.spawn({ command: `echo up; cat # ${marker}` })
    try {
      // Its first line means the chain has run: nsenter is there to be found.
      await new Promise<void>((resolve, reject) => {
        proc.stdout.once('data', () => resolve())
        proc.exited.then(() => reject(new Error('the process exited before it printed')))
      })
      // nsenter, on the host, is what the parked shell became: its parent started it.
      const nsenter = spawnSync('pgrep', ['-u', '0', '-x', '-f', `\\S*nsenter .*${marker}.*`], { encoding: 'utf8' }).stdout.trim().split('\n').filter(Boolean)
      assert.equal(nsenter.length, 1, `one nsenter for the spawned process: ${nsenter.join(',')}`)
      const status = (pid: string) => fs.readFileSync(`/proc/${pid}/status`, 'utf8')
      const parent = field(status(nsenter[0]!), 'PPid')!
      assert.match(fs.readFileSync(`/proc/${parent}/cmdline`, 'utf8'), /spawner-process\.ts/, 'started by a spawner')
      assert.equal(field(status(parent), 'Seccomp'), '2', 'the spawner runs under the filter')
      assert.equal(field(status(parent), 'NoNewPrivs'), '1', 'and no_new_privs')
    } finally {
      proc.stdin.end()
      await proc.exited
    }
  })

  it('runs a command on a shell that entered the sandbox while parked: no nsenter started for it, the filter, no_new_privs and its namespaces as the init', async () => {
    sb ??= await provider.create(spec('nnp'))
    // The first command may run on a shell parked before the init existed; the next on a refill.
    await sb.exec({ command: 'true' })
    const marker = `entered-${randomBytes(4).toString('hex')}`
    const stop = new AbortController()
    const seen = new Promise<string[]>((resolve) => {
      const r = sb.exec({ command: `echo up; sleep 60 # ${marker}`, onStdout: () => resolve(spawnSync('pgrep', ['-f', marker], { encoding: 'utf8' }).stdout.trim().split('\n').filter(Boolean)) }, stop.signal)
      r.then(() => resolve([]), () => resolve([]))
    })
    const pids = await seen
    try {
      // Only the command's own shell holds it: the command line reached a shell already inside.
      assert.equal(pids.length, 1, `one process with the command in its command line: ${pids.map((p) => fs.readFileSync(`/proc/${p}/cmdline`, 'utf8')).join(' | ')}`)
      const status = (pid: string) => fs.readFileSync(`/proc/${pid}/status`, 'utf8')
      const shell = pids[0]!
      assert.notEqual(field(status(shell), 'Uid'), '0', 'the command runs as the sandbox user')
      assert.equal(field(status(shell), 'Seccomp'), '2')
      assert.equal(field(status(shell), 'NoNewPrivs'), '1')
      const init = (await sb.exec({ command: 'echo $(readlink /proc/1/ns/pid /proc/1/ns/mnt /proc/1/ns/net /proc/1/ns/user)' })).stdout.toString().trim()
      const ns = ['pid', 'mnt', 'net', 'user'].map((n) => fs.readlinkSync(`/proc/${shell}/ns/${n}`)).join(' ')
      assert.equal(ns, init, 'the namespaces of the sandbox')
      // It entered through nsenter while parked, which the spawner started.
      const entered = field(status(shell), 'PPid')!
      assert.match(fs.readFileSync(`/proc/${entered}/cmdline`, 'utf8'), /nsenter/)
      assert.match(fs.readFileSync(`/proc/${field(status(entered), 'PPid')}/cmdline`, 'utf8'), /spawner-process\.ts/)
    } finally {
      stop.abort()
    }
  })

  it('keeps a second shell parked inside while a command runs, for a command that follows at once', async () => {
    sb ??= await provider.create(spec('nnp'))
    // The parked shells' script, matched without matching this command's own line.
    const count = 'pgrep -c -f "printf [P]"'
    let seen = 0
    for (let i = 0; i < 100 && seen === 0; i++) {
      seen = Number((await sb.exec({ command: count })).stdout.toString().trim())
      // Refills are parked after a command ends: give them a moment before asking again.
      if (seen === 0) await new Promise((r) => setTimeout(r, 50))
    }
    // Two are kept ahead: the other spare, and the refill of the one this command took, which may
    // have entered by the time pgrep looks (it did on a loaded machine).
    assert.ok(seen >= 1 && seen <= 2, `another shell parked in the sandbox, at most the two kept ahead (saw ${seen})`)
  })

  it('refuses each call the allowlist leaves out from inside: EPERM, ENOSYS past the table and for clone3, EAFNOSUPPORT for odd sockets', async () => {
    const arch = filterArch(process.arch)
    if (!arch) return assert.fail(`no syscall table for ${process.arch}`)
    sb ??= await provider.create(spec('nnp'))
    const calls = CALLS[arch]
    // name:number:first argument:second argument, and the errno each should end with (ok: allowed).
    const probes: Array<[string, string]> = [
      ...Object.entries(REFUSED[arch]).map(([name, nr]): [string, string] => [`${name}:${nr}:0:0`, '1']),
      [`clone3:${calls.clone3}:0:0`, '38'],
      [`clone-newuser:${calls.clone}:${CLONE_NEWUSER | SIGCHLD}:0`, '1'],
      [`unshare-newuser:${calls.unshare}:${CLONE_NEWUSER}:0`, '1'],
      [`unshare-newns:${calls.unshare}:${CLONE_NEWNS}:0`, '1'],
      [`past-table:${PAST_TABLE}:0:0`, '38'],
      [`far-past-table:1000:0:0`, '38'],
      [`socket-vsock:${calls.socket}:${AF.VSOCK}:${SOCK_STREAM}`, '97'],
      [`socket-alg:${calls.socket}:${AF.ALG}:5`, '97'],
      [`socket-packet:${calls.socket}:${AF.PACKET}:${SOCK_STREAM}`, '97'],
      ...Object.entries(ODD_PERSONALITIES).map(([name, flag]): [string, string] => [`personality-${name}:${calls.personality}:${flag}:0`, '1']),
      ...(arch === 'x64' ? [[`x32-getpid:${X32_BIT + calls.getpid}:0:0`, '1'] as [string, string]] : []),
      // Controls: what ordinary programs do passes the same filter.
      [`getpid:${calls.getpid}:0:0`, 'ok'],
      [`socket-unix:${calls.socket}:${AF.UNIX}:${SOCK_STREAM}`, 'ok'],
      [`socket-inet6:${calls.socket}:${AF.INET6}:${SOCK_STREAM}`, 'ok'],
      [`personality-query:${calls.personality}:${0xffffffff}:0`, 'ok'],
    ]
    // Perl's syscall(): a raw call with the given first two arguments, zeros after them. A clone
    // that should have been refused exits at once in the child.
    const perl = `perl -e 'for (@ARGV) { my ($n, $nr, $a, $b) = split /:/; $! = 0; my $r = syscall($nr + 0, $a + 0, $b + 0, 0, 0, 0); ` +
      `exit 0 if $r == 0 && $n =~ /^clone/; print "$n=", ($r >= 0 ? "ok" : $! + 0), "\\n" }' ${probes.map(([p]) => p).join(' ')}`
    const want = Object.fromEntries(probes.map(([p, errno]) => [p.split(':')[0], errno]))
    for (const how of ['exec', 'spawn'] as const) {
      const out = how === 'exec' ? (await sb.exec({ command: perl })).stdout.toString() : (await output(await sb.spawn({ command: perl }))).out
      const got = Object.fromEntries(out.trim().split('\n').map((l) => l.split('=')))
      assert.deepEqual(got, want, how)
    }
  })

  it('gives a command the environment asked for and nothing of the host shells that entered, values with newlines and quotes kept', async () => {
    sb ??= await provider.create(spec('nnp'))
    await sb.exec({ command: 'mkdir -p sub' })
    const value = 'two\nlines "quoted" $NOT_EXPANDED \'single\''
    const r = await sb.exec({ command: 'env -0', cwd: 'sub', env: { MULTI: value, CDPATH: '/tmp' } })
    assert.equal(r.exitCode, 0, r.stderr.toString())
    const env = new Map(r.stdout.toString().split('\0').filter(Boolean).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]))
    assert.equal(env.get('MULTI'), value)
    assert.equal(env.get('PATH'), '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'the sandbox PATH, not the host shells\'')
    assert.equal(env.get('PWD'), '/workspace/sub', 'in the folder asked for, whatever CDPATH says')
    assert.equal(env.has('OLDPWD'), false, 'no trace of the folder the entering shell came from')
    // The command's shell is a fresh one's: its name, no arguments, nothing of the entering
    // shell's own variables (a caller's of the same name kept), IFS its own whatever the caller says.
    const shell = await sb.exec({ command: 'printf "%s|%s|%s|%s" "$0" "$#" "${_warren_line-none}" "$_warren_env"', env: { _warren_env: 'mine' } })
    assert.equal(shell.stdout.toString(), '/bin/sh|0|none|mine', shell.stderr.toString())
    // Errors name the line of the command as a fresh shell counts them.
    const missing = await sb.exec({ command: 'warren_no_such_command\nwarren_nor_this' })
    assert.deepEqual(missing.stderr.toString().trim().split('\n'), ['/bin/sh: 1: warren_no_such_command: not found', '/bin/sh: 2: warren_nor_this: not found'])
    const ifs = await sb.exec({ command: 'printf "[%s]" "$IFS"; echo "$FOO"', env: { IFS: ',', FOO: 'a,b' } })
    assert.equal(ifs.stdout.toString(), '[ \t\n]a,b\n', ifs.stderr.toString())
  })

  it('still runs ordinary work: git, a compiler, node and npm, a server listening', async () => {
    sb ??= await provider.create(spec('nnp'))
    const script = [
      'set -e',
      'export HOME=/workspace GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b',
      'mkdir -p work && cd work && git init -q . && echo hi > a.txt && git add a.txt && git commit -qm first && git log --oneline | wc -l',
      'if command -v cc >/dev/null; then printf "#include <stdio.h>\\nint main(void){puts(\\"compiled\\");return 0;}\\n" > m.c && cc -O1 -o m m.c && ./m; else echo compiled; fi',
      'node -e "const w = new (require(\\"worker_threads\\").Worker)(\\"1\\", {eval: true}); w.on(\\"exit\\", () => console.log(\\"node\\", process.version.slice(0, 1)))"',
      'npm --version >/dev/null && echo npm',
      // A dev server in the background, reached from a second process.
      'node -e "require(\\"http\\").createServer((q, s) => s.end(\\"served\\")).listen(4321, \\"127.0.0.1\\")" & S=$!',
      'for i in $(seq 100); do node -e "require(\\"http\\").get(\\"http://127.0.0.1:4321\\", (r) => r.pipe(process.stdout)).on(\\"error\\", () => process.exit(1))" && break; sleep 0.2; done',
      'echo; kill $S',
    ].join('\n')
    const r = await sb.exec({ command: script, timeoutMs: 90_000 })
    assert.equal(r.exitCode, 0, r.stderr.toString())
    assert.deepEqual(r.stdout.toString().trim().split('\n'), ['1', 'compiled', 'node v', 'npm', 'served'])
  })

  it('reaps a fork bomb left in the background once the workspace is at its pids ceiling; a small background process lives on', async () => {
    const bombed = await provider.create({ ...spec('bomb'), limits: { memoryBytes: 256 * MiB, pids: 64, cpus: 0.5 } })
    try {
      const sleeper = (await bombed.exec({ command: 'sleep 1000 >/dev/null 2>&1 & echo $!' })).stdout.toString().trim()
      // The bomb goes to the background (bash retries a refused fork, so it holds on); the command
      // forks until a fork is refused (the shell then gives up): the workspace is at its ceiling.
      const bomb = await bombed.exec({ command: "bash -c 'f() { f | f & }; f' >/dev/null 2>&1 & while (:); do :; done", timeoutMs: 60_000 })
      assert.match(bomb.stderr.toString(), /fork/i)
      // A command substitution forks: it fails while the bomb holds every pid.
      const next = await bombed.exec({ command: `echo $(echo alive); kill -0 ${sleeper} && echo sleeper`, timeoutMs: 60_000 })
      assert.equal(next.stdout.toString(), 'alive\nsleeper\n', next.stderr.toString())
    } finally {
      await bombed.destroy()
    }
  })

  it('kills nothing left in the background when what holds the pids ceiling is a command still running', async () => {
    const bombed = await provider.create({ ...spec('fgbomb'), limits: { memoryBytes: 256 * MiB, pids: 64, cpus: 0.5 } })
    try {
      // A dev server a preview may depend on, left in the background.
      const server = (await bombed.exec({ command: 'sleep 1000 >/dev/null 2>&1 & echo $!' })).stdout.toString().trim()
      // A running command takes the pids left but a few (fewer than a command needs), says so, and holds them.
      const stop = new AbortController()
      let full!: () => void
      const atCeiling = new Promise<void>((resolve) => (full = resolve))
      const bomb = bombed.exec(
        {
          command: 'for i in $(seq 54); do sleep 1000 & done; echo full; exec sleep 1000',
          onStdout: (chunk) => chunk.toString().includes('full') && full(),
        },
        stop.signal,
      )
      // A fork refused on the way ends the command (dash gives up), its sleeps left in the background.
      void bomb.then(full, full)
      await atCeiling
      // Another command at the ceiling: whether or not it finds room, the dev server is no cause of it.
      await bombed.exec({ command: 'true', timeoutMs: 60_000 }).catch(() => {})
      stop.abort()
      await bomb.catch(() => {})
      const next = await bombed.exec({ command: `kill -0 ${server} && echo server`, timeoutMs: 60_000 })
      assert.equal(next.stdout.toString(), 'server\n', next.stderr.toString())
    } finally {
      await bombed.destroy()
    }
  })
})

/**
 * A classic BPF interpreter for the few opcodes a seccomp filter uses: what the kernel would
 * answer for one call (`allow`, `EPERM`, `ENOSYS`, or the raw return value).
 */
function verdict(filter: Buffer, arch: number, nr: number, arg0 = 0): string {
  const data = Buffer.alloc(64)
  data.writeInt32LE(nr, 0)
  data.writeUInt32LE(arch, 4)
  data.writeBigUInt64LE(BigInt(arg0), 16)
  let a = 0
  for (let pc = 0; pc < filter.length / 8; pc++) {
    const code = filter.readUInt16LE(pc * 8)
    const jt = filter.readUInt8(pc * 8 + 2)
    const jf = filter.readUInt8(pc * 8 + 3)
    const k = filter.readUInt32LE(pc * 8 + 4)
    if (code === 0x20) a = data.readUInt32LE(k)
    else if (code === 0x15) pc += a === k ? jt : jf
    else if (code === 0x25) pc += a > k ? jt : jf
    else if (code === 0x35) pc += a >= k ? jt : jf
    else if (code === 0x45) pc += (a & k) !== 0 ? jt : jf
    else if (code === 0x06) return k === 0x7fff0000 ? 'allow' : k === 0x50001 ? 'EPERM' : k === 0x50026 ? 'ENOSYS' : k === 0x50061 ? 'EAFNOSUPPORT' : `0x${k.toString(16)}`
    else throw new Error(`unexpected opcode 0x${code.toString(16)} at ${pc}`)
  }
  throw new Error('the filter ran off its end')
}

describe('the syscall filter, as the kernel would run it', () => {
  const AUDIT = { x64: 0xc000003e, arm64: 0xc00000b7 }
  for (const arch of ['x64', 'arm64'] as const) {
    it(`${arch}: refuses every listed call and namespaces in clone and unshare, allows the rest`, () => {
      const f = seccompFilter(arch)
      const calls = CALLS[arch]
      for (const [name, nr] of Object.entries(REFUSED[arch])) assert.equal(verdict(f, AUDIT[arch], nr), 'EPERM', name)
      assert.equal(verdict(f, AUDIT[arch], calls.clone3), 'ENOSYS', 'clone3 (glibc falls back to clone)')
      for (const flag of [CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET]) {
        assert.equal(verdict(f, AUDIT[arch], calls.clone, flag | SIGCHLD), 'EPERM', `clone 0x${flag.toString(16)}`)
        assert.equal(verdict(f, AUDIT[arch], calls.unshare, flag), 'EPERM', `unshare 0x${flag.toString(16)}`)
      }
      assert.equal(verdict(f, AUDIT[arch], calls.unshare, 0x80), 'EPERM', 'unshare CLONE_NEWTIME')
      // fork and threads; unshare of what is no namespace; what nsenter and debuggers need.
      assert.equal(verdict(f, AUDIT[arch], calls.clone, SIGCHLD), 'allow', 'fork')
      assert.equal(verdict(f, AUDIT[arch], calls.clone, 0x3d0f00), 'allow', 'a thread')
      assert.equal(verdict(f, AUDIT[arch], calls.unshare, 0x200), 'allow', 'unshare CLONE_FS')
      for (const name of ['getpid', 'ptrace'] as const) assert.equal(verdict(f, AUDIT[arch], calls[name]), 'allow', name)
      // What joining takes, only in the filter of the shells that join; the init's refuses it.
      const entry = seccompFilter(arch, 'entry')
      for (const name of ['setns', 'chroot'] as const) {
        assert.equal(verdict(f, AUDIT[arch], calls[name]), 'EPERM', `${name} (init)`)
        assert.equal(verdict(entry, AUDIT[arch], calls[name]), 'allow', `${name} (entry)`)
      }
      for (const [name, nr] of Object.entries(REFUSED[arch])) assert.equal(verdict(entry, AUDIT[arch], nr), 'EPERM', `${name} (entry)`)
      // Calls newer than the table, sockets and personalities by their first argument.
      for (const nr of [PAST_TABLE, 999, 0x3fffffff]) assert.equal(verdict(f, AUDIT[arch], nr), 'ENOSYS', `number ${nr}`)
      for (const family of [AF.VSOCK, AF.ALG, AF.PACKET, 0, 45]) assert.equal(verdict(f, AUDIT[arch], calls.socket, family), 'EAFNOSUPPORT', `socket ${family}`)
      for (const family of [AF.UNIX, AF.INET, AF.INET6, AF.NETLINK]) assert.equal(verdict(f, AUDIT[arch], calls.socket, family), 'allow', `socket ${family}`)
      for (const flag of Object.values(ODD_PERSONALITIES)) assert.equal(verdict(f, AUDIT[arch], calls.personality, flag), 'EPERM', `personality 0x${flag.toString(16)}`)
      for (const p of [0, 8, 0x20000, 0xffffffff]) assert.equal(verdict(f, AUDIT[arch], calls.personality, p), 'allow', `personality 0x${p.toString(16)}`)
      // Another architecture's numbers mean other calls.
      const other = arch === 'x64' ? AUDIT.arm64 : AUDIT.x64
      assert.equal(verdict(f, other, calls.getpid), 'EPERM', 'a call of another ABI')
      assert.equal(verdict(f, 0x40000003, calls.getpid), 'EPERM', 'an i386 call')
    })
  }

  it('refuses the x32 ABI on x86_64, and is built for the host', () => {
    assert.equal(verdict(seccompFilter('x64'), AUDIT.x64, 0x40000000 + CALLS.x64.getpid), 'EPERM')
    assert.equal(verdict(seccompFilter('x64'), AUDIT.x64, CALLS.x64.getpid), 'allow', 'control: the same call in the x86_64 ABI')
    assert.equal(filterArch('ppc64'), null, 'no table, no filter (host-check refuses to start workspaces)')
    const host = filterArch(process.arch)
    if (host) assert.deepEqual(seccompFilter(), seccompFilter(host))
  })
})
