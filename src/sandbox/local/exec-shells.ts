import { SandboxUnavailableError } from '../sandbox.ts'
import { enterArgv, type RootUser, type Tools } from './bubblewrap.ts'
import type { SandboxCgroup } from './cgroups.ts'
import { enterRootArgv } from './idmap-root.ts'
import { parkExec, type Entry, type Parked } from './parked.ts'

/**
 * Pids a command needs to start (nsenter forks, its shell forks): with less room than this left
 * under the workspace's ceiling (an eighth of a small ceiling), the workspace is poisoned.
 */
const COMMAND_PIDS = 8
const roomNeeded = (max: number) => Math.min(COMMAND_PIDS, Math.ceil(max / 8))

/**
 * A parked shell waiting in its own exec child group (by name), ready to become the next command;
 * `nsPid`: the init whose sandbox it entered while parked (null: it waits on the host, and its
 * command enters through nsenter).
 */
export type Spare = { parked: Parked; exec: string | null; nsPid: number | null }

/**
 * Shells kept parked ahead. Two: a command that follows another at once (two calls of one step,
 * a script's loop) finds one ready while the other is parked again, instead of waiting for the
 * park it started (a spawner start, a cgroup join, nsenter). Each costs two idle processes.
 */
const DEPTH = 2
/** How long a parked shell inside the sandbox, its script ended, has to exit before it is killed. */
const DISCARD_MS = 2000

/**
 * The shells a sandbox's commands run in: parked ahead (the spares), refilled after each
 * command, and the exec groups still holding what commands left running in the background.
 */
export class ExecShells {
  private tools: Tools
  private cgroup: SandboxCgroup
  /** Whether a spare may be parked now (the sandbox runs) and must be let go (it is destroyed). */
  private state: () => 'running' | 'paused' | 'destroyed'
  /** The running init's host pid, which shells parked now enter; null while there is none. */
  private init: () => number | null
  private uid: number
  /** The shell a spare runs once inside the sandbox (see park). */
  private insideSh: string
  private rootUser: RootUser | null
  private spares: Spare[]
  /** Shells being parked, oldest first (so sooner ready). */
  private refilling: Array<Promise<Spare | null>> = []
  /** Exec groups (names) still holding background processes; removed once they empty. */
  private lingering = new Set<string>()
  private reaping: Promise<void> | null = null

  constructor(o: { tools: Tools; cgroup: SandboxCgroup; spare: Spare | null; state: () => 'running' | 'paused' | 'destroyed'; init: () => number | null; uid: number; insideSh?: string; rootUser?: RootUser | null }) {
    this.tools = o.tools
    this.cgroup = o.cgroup
    this.spares = o.spare ? [o.spare] : []
    this.state = o.state
    this.init = o.init
    this.uid = o.uid
    this.insideSh = o.insideSh ?? o.tools.sh
    this.rootUser = o.rootUser ?? null
  }

  /**
   * The parked spare; else the one being parked (started earlier, so sooner ready); else a shell
   * parked now, the slow path (a start through the spawner and a cgroup join), which enters the
   * sandbox with its command: an init that died meanwhile is then the command's failure (nsenter's
   * exit code), as it is for a spare, not a refusal to run it. One that entered another init's
   * sandbox (the init died and was started again) is let go: it died with it.
   */
  async take(nsPid: number): Promise<Spare> {
    this.sweep()
    await this.reap()
    let spare = this.spares.shift() ?? null
    if (!spare && this.refilling.length > 0) {
      // Claimed: the refill sees it is no longer listed and leaves the spare to us.
      const pending = this.refilling.shift()!
      spare = await pending
    }
    if (spare && (!spare.parked.usable() || (spare.nsPid !== null && spare.nsPid !== nsPid))) {
      void this.discard(spare)
      spare = null
    }
    return spare ?? (await this.park(false))
  }

  /** Parks shells for the next commands, up to DEPTH parked or being parked. */
  refill(): void {
    while (this.spares.length + this.refilling.length < DEPTH && this.state() === 'running') {
      const pending = this.park(true).catch(() => null)
      this.refilling.push(pending)
      void pending.then((spare) => {
        const i = this.refilling.indexOf(pending)
        if (i < 0) return
        this.refilling.splice(i, 1)
        if (!spare) return
        if (this.state() === 'destroyed' || this.spares.length >= DEPTH) void this.discard(spare)
        else this.spares.push(spare)
      })
    }
  }

  /** A command's (or process's) exec group is done with: removed, or kept until what it left running ends. */
  release(group: string | null): void {
    // A destroyed sandbox's groups went with it; a group of that name now may be another
    // sandbox's (the same name made again), whose shell has yet to join it.
    if (this.state() === 'destroyed') return
    if (group && !this.cgroup.removeExec(group)) {
      this.lingering.add(group)
      void this.reap()
    }
  }

  /**
   * What earlier commands left running that holds the workspace at its pids ceiling (a fork bomb
   * sent to the background) is killed, the most populous group first, until a command can start
   * again, while what lingers holds at least half the pids in use; run as a command ends and
   * before the next one starts. A modest background process (a
   * dev server) lives on; spawned processes (MCP servers, the browser) are not candidates.
   */
  reap(): Promise<void> {
    // Nothing left in the background (the usual command): no ceiling to read.
    if (this.lingering.size === 0 && !this.reaping) return Promise.resolve()
    this.reaping ??= this.reapGroups().finally(() => (this.reaping = null))
    return this.reaping
  }

  private async reapGroups(): Promise<void> {
    // Each group once: one that outlived its kill is not tried again in this pass.
    const killed = new Set<string>()
    for (;;) {
      const use = this.cgroup.pidsUse()
      if (this.state() === 'destroyed' || !use || use.max - use.current >= roomNeeded(use.max)) return
      const sizes = [...this.lingering].filter((g) => !killed.has(g)).map((g) => ({ g, n: this.cgroup.pids(g).length })).sort((a, b) => b.n - a.n)
      const biggest = sizes[0]
      // What holds the ceiling is no background: a command still running, or spawned processes.
      // Killing what lingers (a dev server a preview serves) would give that no room back.
      const lingering = sizes.reduce((n, s) => n + s.n, 0)
      if (!biggest || biggest.n === 0 || lingering * 2 < use.current) return
      killed.add(biggest.g)
      await this.cgroup.kill(biggest.g)
      if (this.cgroup.removeExec(biggest.g)) this.lingering.delete(biggest.g)
    }
  }

  /**
   * Ends a parked shell that will not be used, and releases its group once it is gone; resolves
   * then. One inside the sandbox is nsenter's child: the end of its script ends it (it evaluates
   * nothing and exits) and nsenter, which waits for it, then exits. Killed, nsenter would leave it
   * to the host's init to reap, and the sandbox's init, once dying, waits for every process of its
   * namespace to be reaped. So it is killed only if it has not ended a while later.
   */
  discard(spare: Spare, patient = true): Promise<void> {
    const { child } = spare.parked
    child.stdin?.destroy()
    if (child.exitCode !== null || child.signalCode !== null) {
      this.release(spare.exec)
      return Promise.resolve()
    }
    const gone = new Promise<void>((resolve) =>
      child.once('exit', () => {
        clearTimeout(timer)
        this.release(spare.exec)
        resolve()
      }),
    )
    const timer = setTimeout(() => child.kill('SIGKILL'), spare.nsPid === null || !patient ? 0 : DISCARD_MS)
    return gone
  }

  /**
   * The sandbox is being destroyed: the spares go, before its processes are killed (parked shells
   * live in the cgroup, but without cgroups nothing else would end them); resolves once they ended.
   * A paused sandbox's cannot end (they are stopped): they are killed, and not waited for.
   */
  drop(paused: boolean): Promise<void> {
    const spares = this.spares
    const pending = this.refilling
    this.spares = []
    // Claimed here: their refills leave them to us. One still being parked ends once parked.
    this.refilling = []
    const ended = Promise.all([
      ...spares.map((s) => this.discard(s, !paused)),
      ...pending.map((p) => p.then((s) => (s ? this.discard(s, !paused) : undefined))),
    ])
    if (paused) return Promise.resolve()
    // Bounded: what has not ended by then is killed with the rest of the sandbox.
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, DISCARD_MS)
      void ended.then(() => {
        clearTimeout(timer)
        resolve()
      })
    })
  }

  /** A shell parked in a new exec group; with `enter`, inside the sandbox when its init runs. */
  private async park(enter: boolean): Promise<Spare> {
    const exec = this.cgroup.newExec()
    const nsPid = enter ? this.init() : null
    const procsFiles = this.cgroup.procsFiles(exec)
    // Root inside, the entry (perl) joins the cgroups itself: no host shell started before it.
    const rootUser = this.rootUser
    const into: Entry = nsPid === null ? [] : rootUser ? (ctlFd) => enterRootArgv(this.tools.perl, nsPid, { user: rootUser, join: { ctlFd, procsFiles } }) : enterArgv(this.tools, nsPid, this.uid)
    const spare = { parked: parkExec(this.tools, procsFiles, into, this.insideSh), exec, nsPid }
    try {
      await spare.parked.ready
    } catch (err) {
      void this.discard(spare, false)
      throw new SandboxUnavailableError(`the command could not join the sandbox's cgroups: ${(err as Error).message}`)
    }
    return spare
  }

  private sweep(): void {
    for (const exec of this.lingering) if (this.cgroup.removeExec(exec)) this.lingering.delete(exec)
  }
}
