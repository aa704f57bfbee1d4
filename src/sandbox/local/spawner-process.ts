// The spawner: a small Node process, the service's child, that starts the sandboxes' processes for
// it (see spawner.ts). Forking it costs a fraction of forking the service, and none of it is spent
// on the service's event loop. It speaks over its IPC channel only, and ends with the service.
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import type { Socket } from 'node:net'
import type { SpawnerReply, SpawnerRequest } from './spawner-protocol.ts'

/** O_CLOEXEC, as /proc/<pid>/fdinfo's octal `flags` shows it. */
const O_CLOEXEC = 0o2000000

/**
 * Closes what this process inherited without close-on-exec beyond stdio (a supervisor's pipe, a
 * terminal's descriptor, left open by whoever started the service): spawn keeps every such fd
 * open in its child, so each would reach every sandbox process, workspace commands among them.
 * Node's own descriptors, its IPC channel among them, are close-on-exec and stay.
 */
function closeInheritedFds(): void {
  const channel = (process.channel as { fd?: number } | undefined)?.fd
  for (const name of fs.readdirSync('/proc/self/fd')) {
    const fd = Number(name)
    if (fd <= 2 || fd === channel) continue
    let flags: string | undefined
    try {
      flags = /^flags:\s*([0-7]+)/m.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))?.[1]
    } catch {
      continue // the directory's own descriptor, closed once read
    }
    if (flags !== undefined && (parseInt(flags, 8) & O_CLOEXEC) === 0) fs.closeSync(fd)
  }
}
closeInheritedFds()

const children = new Map<number, ChildProcess>()
// The service may be gone (stopping): what cannot be told any more is dropped quietly.
const reply = (m: SpawnerReply, handle?: Socket) => process.send!(m, handle, {}, () => {})

process.on('message', (m: SpawnerRequest) => {
  if (m.t === 'kill') {
    const child = children.get(m.id)
    if (child && child.exitCode === null && child.signalCode === null) child.kill(m.signal)
    return
  }
  let child: ChildProcess
  try {
    child = spawn(m.file, m.args, { env: m.env, stdio: Array<'pipe'>(m.pipes).fill('pipe'), detached: true, uid: m.uid, gid: m.gid })
  } catch (err) {
    return reply({ t: 'error', id: m.id, message: (err as Error).message })
  }
  // The pipes must reach the service unread and open: a socket starts reading as it is made, and
  // what it read here would be lost; stopped in the same tick, before any poll could read a byte.
  // And taken from the ChildProcess, which at the exit destroys its stdin and resumes its output
  // (a pipe still queued behind another's handle would then be lost).
  const pipes = [...child.stdio] as unknown as Array<Socket | null>
  for (const s of pipes) (s as unknown as { _handle?: { readStop?: () => void } })?._handle?.readStop?.()
  const taken = child as unknown as { stdio: unknown[]; stdin: unknown; stdout: unknown; stderr: unknown }
  taken.stdio = []
  taken.stdin = taken.stdout = taken.stderr = null
  child.once('error', (err) => {
    children.delete(m.id)
    reply({ t: 'error', id: m.id, message: err.message })
  })
  // Not started (no such program, say): its pipes, made already, are closed here.
  if (child.pid === undefined) {
    for (const s of pipes) s?.destroy()
    return
  }
  children.set(m.id, child)
  reply({ t: 'pid', id: m.id, pid: child.pid })
  // One handle a message (the channel's rule); the channel keeps these messages and the exit in order.
  pipes.forEach((s, i) => {
    if (s) reply({ t: 'fd', id: m.id, i }, s)
  })
  child.once('exit', (code, signal) => {
    children.delete(m.id)
    reply({ t: 'exit', id: m.id, code, signal })
  })
})

// The service is gone (stopped, or killed): what it started lives on in its sandboxes' cgroups,
// which the next service clears, as it would after the service's own death. 'disconnect' is not
// told while a pipe's handle waits for the service's receipt (which will never come), so the
// parent is watched too: reparented means orphaned. Exiting closes what was never handed over.
process.on('disconnect', () => process.exit(0))
const parent = process.ppid
setInterval(() => {
  if (process.ppid !== parent) process.exit(0)
}, 200).unref()
