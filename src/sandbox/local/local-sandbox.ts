import fs from 'node:fs'
import type { Socket } from 'node:net'
import path from 'node:path'
import type { ChangeWindow, EntryStat, ExecRequest, ExecResult, ListedEntry, OpenedFile, Sandbox, SandboxProcess, SandboxSpec, SandboxState, SpawnRequest, WorkspaceReader, WorkspaceSnapshot } from '../sandbox.ts'
import { SandboxUnavailableError } from '../sandbox.ts'
import { execArgv, sandboxEnv, type RootUser, type Tools } from './bubblewrap.ts'
import type { SandboxCgroup } from './cgroups.ts'
import { parkSpawn, type Parked } from './parked.ts'
import { ExecShells, type Spare } from './exec-shells.ts'
import { abortedResult, runCommand } from './run-command.ts'
import { parkInit, startInit, type InitHandle } from './sandbox-init.ts'
import { ChangeTracker } from './change-tracker.ts'
import { cloneInto } from './clone-repo.ts'
import { workspaceReader, writeWorkspaceFile } from './workspace-files.ts'
import type { ImageRoot } from './image-root.ts'

/** The network hook a local sandbox was given (see LocalProviderOptions.network). */
export type AttachedNetwork = { netnsName: string | null; env: Record<string, string>; previewHost: string }

export type LocalSandboxContext = {
  spec: SandboxSpec
  /** The workspace's host folder, bound at the spec's mount: the provider's business, not the seam's. */
  workspaceDir: string
  /** See LocalProviderOptions.maxWatches. */
  maxWatches: number
  uid: number
  tools: Tools
  cgroup: SandboxCgroup
  /** See InitOptions.stageDir. */
  stageDir: string | null
  network: AttachedNetwork | null
  detachNetwork: () => Promise<void>
  /** Tells the provider the sandbox is gone (frees its uid, forgets its id). */
  released: () => Promise<void>
  /** The image it runs on (see image-root.ts) with overlayfs's options; null on the host's system. */
  image: (ImageRoot & { overlay: string; root: { base: number; lowers: Array<{ src: string; dst: string }>; user: RootUser } | null }) | null
  /** Shells parked ahead in this sandbox's cgroups (from the provider's warm pool), if any. */
  initShell: Parked | null
  spare: Spare | null
}


export class LocalSandbox implements Sandbox {
  readonly id: string
  /** Host uid (and gid) every process of this sandbox runs as. */
  readonly uid: number
  readonly cgroup: SandboxCgroup
  private ctx: LocalSandboxContext
  private current: SandboxState = 'running'
  private init: InitHandle | null = null
  private starting: Promise<InitHandle> | null = null
  private stopped: 'freezer' | 'sigstop' | null = null
  private shells: ExecShells
  private destroying: Promise<void> | null = null
  private files: WorkspaceReader
  /** Made at the first window: a sandbox that never runs a bash command never watches its tree. */
  private changes: ChangeTracker | null = null

  constructor(ctx: LocalSandboxContext) {
    this.ctx = ctx
    this.files = workspaceReader(ctx.workspaceDir)
    this.id = ctx.spec.id
    this.uid = ctx.uid
    this.cgroup = ctx.cgroup
    this.shells = new ExecShells({
      tools: ctx.tools,
      cgroup: ctx.cgroup,
      spare: ctx.spare,
      state: () => this.current,
      init: () => (this.init && !this.init.exited ? this.init.nsPid : null),
      uid: this.uid,
      ...(ctx.image ? { insideSh: '/bin/sh', rootUser: ctx.image.root?.user ?? null } : {}),
    })
  }

  get image(): { ref: string; digest: string } | undefined {
    const i = this.ctx.image
    return i ? { ref: i.ref, digest: i.digest } : undefined
  }

  get state(): SandboxState {
    return this.current
  }

  /** Starts the init; again after it died (an OOM kill, say): what ran in the background is gone then. */
  ensureInit(): Promise<InitHandle> {
    // The init's exit may not have been reported yet when its namespace is already gone (killed a
    // moment ago): its pid 1 is looked at too, so no command is sent into a dead namespace.
    if (this.init && !this.init.exited && pidAlive(this.init.nsPid)) return Promise.resolve(this.init)
    if (this.init && !this.init.exited) {
      this.init.exited = true
      this.init.child.kill('SIGKILL')
    }
    if (this.starting) return this.starting
    // Its groups removed from outside (another service's clean-up) took its processes with them:
    // the sandbox is over, and a new init could not join them anyway.
    const gone = this.cgroup.dirs.find((d) => !fs.existsSync(d))
    if (gone) {
      return this.destroy().then(() => {
        throw new SandboxUnavailableError(`the sandbox's cgroup ${gone} was removed by another process, and its processes with it: the sandbox is destroyed`)
      })
    }
    const shell = this.ctx.initShell ?? parkInit(this.ctx.tools, this.cgroup.procsFiles())
    this.ctx.initShell = null
    this.starting = startInit({
      tools: this.ctx.tools,
      uid: this.uid,
      workspaceDir: this.ctx.workspaceDir,
      workspaceMount: this.ctx.spec.workspaceMount,
      stageDir: this.ctx.stageDir,
      netnsName: this.ctx.network?.netnsName ?? null,
      hostname: 'workspace',
      ...(this.ctx.image ? { overlay: this.ctx.image.overlay } : {}),
      ...(this.ctx.image?.root ? { root: { ...this.ctx.image.root, owner: this.uid } } : {}),
    }, shell).then(
      (h) => {
        this.init = h
        this.starting = null
        return h
      },
      (err) => {
        this.starting = null
        throw err
      },
    )
    return this.starting
  }

  async exec(req: ExecRequest, signal?: AbortSignal): Promise<ExecResult> {
    this.usable()
    const { spec } = this.ctx
    // An image's Env under everything the service sets; its WorkingDir where a command naming no folder starts.
    const env = sandboxEnv(spec.workspaceMount, this.ctx.image?.env, this.ctx.network?.env, spec.env, req.env)
    const cwd = req.cwd ? path.posix.resolve(spec.workspaceMount, req.cwd) : (this.ctx.image?.workingDir ?? spec.workspaceMount)
    if (req.command.includes('\0') || cwd.includes('\0')) throw new TypeError('the command or its cwd holds a NUL byte')
    if (signal?.aborted) return abortedResult()
    const init = await this.ensureInit()
    this.usable()
    const { parked, exec: execGroup, nsPid } = await this.shells.take(init.nsPid)
    try {
      const entered = nsPid === init.nsPid
      const { argv, fd9, prelude } = execArgv({ tools: this.ctx.tools, uid: this.uid, nsPid: init.nsPid, cwd, env, command: req.command, entered, rootUser: this.ctx.image?.root?.user ?? null })
      parked.start(argv, { fd9, prelude })
      return await runCommand({
        child: parked.child,
        req,
        signal,
        killTree: async (pid) => {
          if (execGroup) return this.cgroup.kill(execGroup)
          // Without cgroups: the command's session is one process group (unless it left it).
          if (pid) process.kill(-pid, 'SIGKILL')
        },
      })
    } finally {
      this.shells.release(execGroup)
      // Not while the command runs, nor before its caller has the result: the cgroup join waits
      // for an RCU grace period, and the pipes' arrival costs the event loop a little.
      setImmediate(() => this.shells.refill())
    }
  }

  async spawn(req: SpawnRequest): Promise<SandboxProcess> {
    this.usable()
    const { spec } = this.ctx
    // An image's Env under everything the service sets; its WorkingDir where a command naming no folder starts.
    const env = sandboxEnv(spec.workspaceMount, this.ctx.image?.env, this.ctx.network?.env, spec.env, req.env)
    const cwd = req.cwd ? path.posix.resolve(spec.workspaceMount, req.cwd) : (this.ctx.image?.workingDir ?? spec.workspaceMount)
    if (req.command.includes('\0') || cwd.includes('\0')) throw new TypeError('the command or its cwd holds a NUL byte')
    const init = await this.ensureInit()
    this.usable()
    // Its own exec group: killing it kills what it started, and nothing else.
    const group = this.cgroup.newExec()
    const extraFds = req.extraFds ?? 0
    if (!Number.isInteger(extraFds) || extraFds < 0 || extraFds > 4) throw new TypeError('extraFds must be an integer from 0 to 4')
    const parked = parkSpawn(this.ctx.tools, this.cgroup.procsFiles(group), extraFds)
    try {
      await parked.ready
    } catch (err) {
      void this.shells.discard({ parked, exec: group, nsPid: null })
      throw new SandboxUnavailableError(`the process could not join the sandbox's cgroups: ${(err as Error).message}`)
    }
    const { argv, fd9 } = execArgv({ tools: this.ctx.tools, uid: this.uid, nsPid: init.nsPid, cwd, env, command: req.command, rootUser: this.ctx.image?.root?.user ?? null })
    parked.start(argv, { fd9, stdinFd: 3, passFds: extraFds })
    const child = parked.child
    const exited = new Promise<number | null>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode)
      child.once('exit', (code) => resolve(code))
    })
    void exited.then(() => this.shells.release(group))
    return {
      stdin: child.stdio[3] as NodeJS.WritableStream,
      stdout: child.stdout!,
      stderr: child.stderr!,
      fds: child.stdio.slice(4, 4 + extraFds) as Socket[],
      exited,
      kill: async () => {
        if (group) await this.cgroup.kill(group)
        else if (child.pid) signalPid(-child.pid, 'SIGKILL')
        await exited
      },
    }
  }

  async readFile(p: string): Promise<Buffer | null> {
    this.notDestroyed()
    return this.files.readFile(p)
  }

  async stat(p: string): Promise<EntryStat | null> {
    this.notDestroyed()
    return this.files.stat(p)
  }

  async list(p: string): Promise<ListedEntry[] | null> {
    this.notDestroyed()
    return this.files.list(p)
  }

  async openRead(p: string): Promise<OpenedFile | null> {
    this.notDestroyed()
    return this.files.openRead(p)
  }

  async snapshot(): Promise<WorkspaceSnapshot> {
    this.notDestroyed()
    return this.files.snapshot()
  }

  async openChanges(): Promise<ChangeWindow> {
    this.notDestroyed()
    this.changes ??= new ChangeTracker(this.ctx.workspaceDir, this.cgroup.name, this.ctx.maxWatches)
    return this.changes.open()
  }

  /** The process watching the workspace's folder, while one runs (tests look for leaks with it). */
  get watcherPid(): number | undefined {
    return this.changes?.watcherPid
  }

  async writeFile(p: string, data: Buffer, mode?: number): Promise<void> {
    this.notDestroyed()
    return writeWorkspaceFile(this.ctx.workspaceDir, p, data, this.uid, mode)
  }

  async cloneRepo(req: { url: string; branch?: string; timeoutMs: number }): Promise<{ branch: string } | null> {
    this.notDestroyed()
    return cloneInto(this.ctx.workspaceDir, req)
  }

  async resolvePreview(port: number): Promise<{ host: string; port: number }> {
    this.notDestroyed()
    if (!this.ctx.network) throw new SandboxUnavailableError('no network')
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`invalid port ${port}`)
    return { host: this.ctx.network.previewHost, port }
  }

  async pause(): Promise<void> {
    this.notDestroyed()
    if (this.current === 'paused') return
    // Set first: an exec arriving while the freeze completes is refused, not half-frozen.
    this.current = 'paused'
    // A paused workspace holds no watcher (an inotify instance, the stamps of its files): the next
    // command after the resume starts one again and walks the tree once.
    if (this.changes?.idle) {
      this.changes.close()
      this.changes = null
    }
    if (await this.cgroup.freeze()) {
      this.stopped = 'freezer'
      return
    }
    this.stopped = 'sigstop'
    // A process may fork while we go through the list: go again until nothing new shows up.
    const seen = new Set<number>()
    for (let round = 0; round < 20; round++) {
      const fresh = this.pids().filter((p) => !seen.has(p))
      if (fresh.length === 0) break
      for (const p of fresh) {
        seen.add(p)
        signalPid(p, 'SIGSTOP')
      }
    }
  }

  async resume(): Promise<void> {
    this.notDestroyed()
    if (this.current !== 'paused') return
    if (this.stopped === 'freezer') await this.cgroup.thaw()
    else for (const p of this.pids()) signalPid(p, 'SIGCONT')
    this.stopped = null
    this.current = 'running'
  }

  destroy(): Promise<void> {
    this.destroying ??= (async () => {
      const paused = this.stopped !== null
      this.current = 'destroyed'
      this.changes?.close()
      try {
        await this.shells.drop(paused)
        if (this.cgroup.trackDir) {
          await this.cgroup.destroy()
        } else {
          // Without cgroups the pid namespace is the boundary: its pid 1 dying takes everything with it.
          for (const p of [this.init?.child.pid, this.init?.nsPid, ...this.pids()]) if (p) signalPid(p, 'SIGKILL')
          for (let i = 0; i < 200 && this.pids().length > 0; i++) await new Promise((r) => setTimeout(r, 10))
        }
        this.init?.child.kill('SIGKILL')
      } finally {
        try {
          await this.ctx.detachNetwork()
        } finally {
          await this.ctx.released()
        }
      }
    })()
    return this.destroying
  }

  /** Every pid of the sandbox: its cgroup, or else every process in its pid namespace. */
  pids(): number[] {
    if (this.cgroup.trackDir) return this.cgroup.pids()
    const ns = this.init?.pidns
    if (!ns) return []
    const out: number[] = []
    for (const name of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue
      try {
        if (fs.readlinkSync(`/proc/${name}/ns/pid`) !== ns) continue
        // A zombie is dead already; it only waits for its parent.
        const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8')
        if (stat[stat.lastIndexOf(')') + 2] !== 'Z') out.push(Number(name))
      } catch {
        /* exited */
      }
    }
    return out
  }

  private usable(): void {
    this.notDestroyed()
    if (this.current === 'paused') throw new SandboxUnavailableError('paused')
  }

  private notDestroyed(): void {
    if (this.current === 'destroyed') throw new SandboxUnavailableError('destroyed')
  }
}

/** Whether a process runs (neither gone nor a zombie waiting to be reaped). */
/** The kernel's flag of a task in its exit (include/linux/sched.h). */
const PF_EXITING = 0x4

/**
 * Whether the process lives and is not on its way out: a namespace's pid 1 whose last child died
 * first kills everything in its namespace, still running, before it becomes a zombie, and a command
 * sent into it then would die with it.
 */
function pidAlive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    // After the command name: state, ppid, pgrp, session, tty_nr, tpgid, flags, …
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    const state = fields[0]
    return state !== 'Z' && state !== 'X' && (Number(fields[6]) & PF_EXITING) === 0
  } catch {
    return false
  }
}

function signalPid(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig)
  } catch {
    /* already gone */
  }
}
