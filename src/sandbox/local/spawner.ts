import { fork, type ChildProcess } from 'node:child_process'
import { EventEmitter } from 'node:events'
import type { Socket } from 'node:net'
import path from 'node:path'
import type { Readable, Writable } from 'node:stream'
import type { SpawnerReply, SpawnerRequest } from './spawner-protocol.ts'

/**
 * The sandboxes' processes (parked shells, inits) are started by a small helper process, the
 * spawner, rather than by the service. Starting a process forks its parent, and a fork costs in
 * proportion to the parent's memory: about 5 ms of the service's event loop for a service of a few
 * hundred MiB, paid on every agent step (each command's shell is parked ahead). The spawner's fork
 * costs a fraction of that and none of it on the service's loop; its pipes come back over the IPC
 * channel as handles, so the service reads and writes them as if it had started the process.
 *
 * A process started so looks like a ChildProcess to its user (pid, stdio, exit, kill). The pid is
 * known once `opened` resolves, which also means every pipe has arrived.
 */
export interface SpawnedProcess extends EventEmitter {
  readonly pid: number | undefined
  /** The process's stdio pipes, by fd. */
  readonly stdio: ReadonlyArray<Socket | null>
  readonly stdin: Writable | null
  readonly stdout: Readable | null
  readonly stderr: Readable | null
  readonly exitCode: number | null
  readonly signalCode: NodeJS.Signals | null
  /** Resolves once the pid and every pipe arrived; rejects when the process could not start. */
  readonly opened: Promise<void>
  /** Sends `signal` (SIGTERM by default); false when it has exited already. */
  kill(signal?: NodeJS.Signals): boolean
}

/**
 * `uid`, `gid`: who it runs as (setting them needs root); the spawner's (the service's) when left out.
 * `under`: a command line prefix the spawner itself is started under (seccomp.ts's filterWrap), so
 * that what it starts inherits that (a syscall filter, say) with nothing run again for each process;
 * one spawner is kept for each prefix.
 */
export type SpawnOptions = { env: Record<string, string>; pipes: number; uid?: number; gid?: number; under?: string[] }

/** Starts `file` with `pipes` stdio pipes, detached (its own session), through the spawner. */
export function spawnDetached(file: string, args: string[], o: SpawnOptions): SpawnedProcess {
  const id = nextId++
  const child = new RemoteProcess(id, o.pipes, { t: 'spawn', id, file, args, env: o.env, pipes: o.pipes, uid: o.uid, gid: o.gid })
  connection(o.under ?? []).start(child)
  return child
}

let nextId = 1
/** The live spawner for each prefix it runs under (keyed by its arguments). */
const current = new Map<string, Connection>()

function connection(under: string[]): Connection {
  const key = under.join('\0')
  let conn = current.get(key)
  if (!conn || conn.dead) current.set(key, (conn = new Connection(under)))
  return conn
}

/** How many spawners a start is asked of before it fails: one more after a spawner's death. */
const ATTEMPTS = 2

class Connection {
  dead = false
  private readonly proc: ChildProcess | null = null
  private readonly live = new Map<number, RemoteProcess>()
  /** Why the spawner could not be started (fork refused: no pids, no memory, no fds). */
  private readonly failure: Error | null = null

  private readonly under: string[]

  constructor(under: string[]) {
    this.under = under
    try {
      this.proc = fork(path.join(import.meta.dirname, 'spawner-process.ts'), [], {
        // Its stderr is the service's (a crash of it is seen), its stdout nobody's: it prints nothing.
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
        // Not the service's flags (a profiler's, say): the spawner is a plain Node process, the
        // last of the prefix's arguments when it has one (which execs it, keeping the channel's fd).
        ...(under.length > 0 ? { execPath: under[0], execArgv: [...under.slice(1), process.execPath] } : { execArgv: [] }),
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      })
    } catch (err) {
      this.failure = err as Error
      this.dead = true
      return
    }
    // Neither the process nor its channel keeps the service up, unless a process of ours lives.
    this.proc.unref()
    this.proc.channel?.unref()
    this.proc.on('message', (m: SpawnerReply, handle?: Socket) => this.receive(m, handle))
    // A fork refused (EAGAIN at the pids limit, say) fails what was asked of it, and no more: a
    // spawner started again at once would be refused again, for ever.
    this.proc.on('error', (err) => this.gone(err))
    // 'close', not 'exit': every message it sent before dying has been read by then (a pid among
    // them), so nothing it started is asked again of the next.
    this.proc.on('close', () => this.gone(null))
  }

  start(child: RemoteProcess): void {
    child.conn = this
    child.attempts++
    if (this.dead || !this.proc) return child.failed(new Error(`the spawner process could not be started: ${this.failure?.message ?? 'it died'}`))
    if (this.live.size === 0) this.proc.channel?.ref()
    this.live.set(child.id, child)
    this.send(child.request)
    // A kill asked of a spawner that died before it started the process.
    if (child.killWith) this.send({ t: 'kill', id: child.id, signal: child.killWith })
  }

  send(req: SpawnerRequest): void {
    if (this.dead || !this.proc?.connected) return
    // Its death is told by 'close'; what could not be sent meanwhile is settled then.
    this.proc.send(req, undefined, {}, () => {})
  }

  private receive(m: SpawnerReply, handle?: Socket): void {
    const child = this.live.get(m.id)
    if (!child) return void handle?.destroy()
    if (m.t === 'pid') child.gotPid(m.pid)
    else if (m.t === 'fd' && handle) child.gotPipe(m.i, handle)
    else if (m.t === 'exit') this.end(child, () => child.exited(m.code, m.signal))
    else if (m.t === 'error') this.end(child, () => child.failed(new Error(m.message)))
  }

  private end(child: RemoteProcess, report: () => void): void {
    this.live.delete(child.id)
    if (this.live.size === 0) this.proc?.channel?.unref()
    report()
  }

  /**
   * The spawner died (killed from outside), or could not be started (`refused`): its processes'
   * exits would never be told. They are killed and reported killed, as a sandbox whose init died.
   * What it had not started yet is asked of a new spawner, once; refused, it fails.
   */
  private gone(refused: Error | null): void {
    if (this.dead) return
    this.dead = true
    for (const child of [...this.live.values()]) {
      this.live.delete(child.id)
      if (child.pid === undefined) {
        if (refused) child.failed(new Error(`the spawner process could not be started: ${refused.message}`))
        else if (child.attempts < ATTEMPTS) connection(this.under).start(child)
        else child.failed(new Error('the spawner process died before it started the process'))
        continue
      }
      try {
        process.kill(child.pid, 'SIGKILL')
      } catch {
        /* already gone */
      }
      child.exited(null, 'SIGKILL')
    }
    this.proc?.channel?.unref()
  }
}

class RemoteProcess extends EventEmitter implements SpawnedProcess {
  pid: number | undefined
  exitCode: number | null = null
  signalCode: NodeJS.Signals | null = null
  readonly stdio: Array<Socket | null>
  readonly opened: Promise<void>
  private arrived = 0
  private done = false
  private open!: () => void
  private refuse!: (err: Error) => void

  /** The spawner that started it (or is asked to), and how many were asked. */
  conn: Connection | null = null
  attempts = 0
  /** The signal a kill asked for, sent again should the start be asked of another spawner. */
  killWith: NodeJS.Signals | null = null
  readonly id: number
  readonly request: SpawnerRequest
  private readonly pipes: number

  constructor(id: number, pipes: number, request: SpawnerRequest) {
    super()
    this.id = id
    this.pipes = pipes
    this.request = request
    this.stdio = Array<Socket | null>(pipes).fill(null)
    this.opened = new Promise<void>((resolve, reject) => {
      this.open = resolve
      this.refuse = reject
    })
    this.opened.catch(() => {}) // marks it handled: whoever awaits `opened` gets the refusal
  }

  get stdin(): Writable | null {
    return this.stdio[0] ?? null
  }
  get stdout(): Readable | null {
    return this.stdio[1] ?? null
  }
  get stderr(): Readable | null {
    return this.stdio[2] ?? null
  }

  kill(signal: NodeJS.Signals = 'SIGTERM'): boolean {
    if (this.done) return false
    this.killWith = signal
    this.conn?.send({ t: 'kill', id: this.id, signal })
    return true
  }

  gotPid(pid: number): void {
    this.pid = pid
    if (this.pipes === 0) this.open()
  }

  gotPipe(i: number, socket: Socket): void {
    // A received socket starts reading as it is made: a pipe that ends at once (a process that
    // exited) would then end, and close, before its user, who has it only once the last pipe came,
    // could listen. It reads from when it is read, as a stream paused from the start would.
    // Undone as Node's own pauseOnCreate leaves a socket: not reading, and no read pending.
    const inner = socket as unknown as { _handle?: { reading?: boolean; readStop?: () => number }; _readableState?: { reading: boolean } }
    if (inner._handle?.reading) {
      inner._handle.reading = false
      inner._handle.readStop?.()
      if (inner._readableState) inner._readableState.reading = false
    }
    socket.on('error', () => {}) // the process's end reports it: a broken pipe here is its side going away
    this.stdio[i] = socket
    if (++this.arrived === this.pipes) this.open()
  }

  exited(code: number | null, signal: NodeJS.Signals | null): void {
    this.done = true
    this.exitCode = code
    this.signalCode = signal
    // Every pipe arrived before the exit (the channel keeps order), unless the spawner died.
    this.refuse(new Error(`the process exited (${signal ?? code}) before its pipes arrived`))
    this.emit('exit', code, signal)
    // As a ChildProcess does at the exit: a pipe its user never read (a stdin it only wrote, a
    // shell parked and let go) reads on to its end and closes, or its fd would be held for good.
    // Whoever reads it has had this tick to start.
    process.nextTick(() => {
      for (const s of this.stdio) if (s && s.readable && !s.destroyed) s.resume()
    })
  }

  failed(err: Error): void {
    this.done = true
    // As a ChildProcess that could not spawn: a negative exit code, and no 'exit'.
    this.exitCode = -1
    this.refuse(err)
    // `opened` tells it already; an 'error' nobody listens to would throw out of the channel's handler.
    if (this.listenerCount('error') > 0) this.emit('error', err)
  }
}

/** What a host command started through the spawner printed, and how it ended. */
export type HostRun = { code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }

/**
 * Runs a host command (no shell) through the spawner, as root, feeding `input` on stdin, and
 * resolves once it exited and its output ended. Rejects only when it could not start.
 */
export async function runOnHost(file: string, args: string[], o: { input?: string; env?: Record<string, string> } = {}): Promise<HostRun> {
  const child = spawnDetached(file, args, { env: o.env ?? { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' }, pipes: 3, uid: 0, gid: 0 })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code, signal) => resolve({ code, signal }))
  })
  // Told by `opened` when it could not start.
  exited.catch(() => {})
  await child.opened
  const text = (s: Readable) =>
    new Promise<string>((resolve) => {
      let t = ''
      s.setEncoding('utf8').on('data', (d: string) => (t += d))
      s.once('end', () => resolve(t))
      s.once('close', () => resolve(t))
    })
  const out = text(child.stdout!)
  const err = text(child.stderr!)
  // The command may exit before reading its input; its exit code tells.
  child.stdin!.on('error', () => {})
  child.stdin!.end(o.input ?? '')
  const [end, stdout, stderr] = await Promise.all([exited, out, err])
  return { ...end, stdout, stderr }
}
