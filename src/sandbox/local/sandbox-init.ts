import fs from 'node:fs'
import type { SpawnedProcess } from './spawner.ts'
import { rootMap } from './idmap-root.ts'
import type { Readable, Writable } from 'node:stream'
import { SandboxUnavailableError } from '../sandbox.ts'
import { groupFile, initArgv, passwdFile, type InitOptions, type Tools } from './bubblewrap.ts'
import { park, type Parked } from './parked.ts'
import { seccompFilter } from './seccomp.ts'

/** The running init of a sandbox: what exec calls enter. */
export type InitHandle = {
  child: SpawnedProcess
  /** Host pid of pid 1 inside the sandbox. */
  nsPid: number
  /** `pid:[inode]` of the sandbox's pid namespace, to find its processes without cgroups. */
  pidns: string
  exited: boolean
}

const START_TIMEOUT_MS = 10_000

/**
 * A parked shell with the fds the init needs (see initArgv): info 3, passwd 4, group 5, filter 6,
 * ready 7.
 * It waits in a mount namespace of its own (host mounts still propagate in), where staging the
 * workspace costs one mount and leaves nothing on the host.
 */
export function parkInit(tools: Tools, procsFiles: string[]): Parked {
  return park(tools.sh, procsFiles, 5, [tools.unshare, '-m', '--propagation', 'slave', '--'])
}

export async function startInit(o: InitOptions, parked: Parked): Promise<InitHandle> {
  try {
    await parked.ready
  } catch (err) {
    throw new SandboxUnavailableError(`the sandbox could not join its cgroups: ${(err as Error).message}`)
  }
  const { child } = parked
  const fds = child.stdio as unknown as Array<Readable & Writable>
  const info = fds[3]!
  const ready = fds[parked.ctlFd]!
  if (o.overlay === undefined) {
    fds[4]!.end(passwdFile(o.uid, o.workspaceMount))
    fds[5]!.end(groupFile(o.uid))
  } else {
    // On an image its own /etc/passwd stands; fd 4 is the pipe the init waits on (see imageInitArgv),
    // held open by the child's stdio for as long as the init lives, and never written.
    if (!o.root) fds[5]!.end()
  }
  fds[6]!.end(seccompFilter())
  let stderr = ''
  child.stderr!.setEncoding('utf8')
  // Read for as long as the init lives, so a chatty one never blocks on a full pipe.
  child.stderr!.on('data', (s: string) => {
    if (stderr.length < 4096) stderr += s
  })
  child.stdout!.resume()
  const { before, argv } = initArgv(o)
  parked.start(argv, { keepFds: true, before })

  return new Promise<InitHandle>((resolve, reject) => {
    let text = ''
    let settled = false
    let isReady = false
    const handle: InitHandle = { child, nsPid: 0, pidns: '', exited: child.exitCode !== null }
    const finish = (err: Error | null) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      // The sandbox holds the other ends open; we have what we need.
      info.destroy()
      ready.destroy()
      if (!err) return resolve(handle)
      if (!handle.exited) child.kill('SIGKILL')
      reject(err)
    }
    const fail = (why: string) => finish(new SandboxUnavailableError(`bubblewrap could not start the sandbox: ${why}`))
    const timer = setTimeout(() => fail(`no answer within ${START_TIMEOUT_MS / 1000} s`), START_TIMEOUT_MS)
    const maybeDone = () => {
      if (isReady && handle.nsPid) finish(null)
    }
    child.on('exit', (code, signal) => {
      handle.exited = true
      // Give stderr a moment: it says why bwrap gave up.
      setTimeout(() => fail(stderr.trim() || `it exited with ${signal ?? `code ${code}`}`), 20)
    })
    info.setEncoding('utf8')
    info.on('data', (s: string) => {
      text += s
      let parsed: { 'child-pid'?: number; 'pid-namespace'?: number }
      try {
        parsed = JSON.parse(text)
      } catch {
        return
      }
      handle.nsPid = parsed['child-pid'] ?? 0
      handle.pidns = `pid:[${parsed['pid-namespace'] ?? 0}]`
      if (!handle.nsPid) return fail(`bubblewrap gave no sandbox pid: ${text}`)
      if (o.root) {
        // bubblewrap waits on fd 5 for the maps of its user namespace: root inside is host uid base.
        // Its --disable-userns cannot be had with a map written from outside (bubblewrap refuses the
        // pair): the namespace's own limit of user namespaces is set to 0 instead, by whatever enters
        // the sandbox, before it runs anything (see enterRootArgv): nothing runs in it but the init
        // until something enters, and entering here too cost every start two more processes.
        const pid = handle.nsPid
        try {
          for (const f of ['uid_map', 'gid_map']) fs.writeFileSync(`/proc/${pid}/${f}`, rootMap(o.root.base, o.uid))
        } catch (err) {
          return fail(`the user namespace's uid range could not be mapped: ${(err as Error).message}`)
        }
        fds[5]!.end('1')
      }
      maybeDone()
    })
    ready.on('data', (b: Buffer) => {
      if (!b.includes(0x52)) return
      isReady = true
      maybeDone()
    })
    ready.resume()
  })
}
