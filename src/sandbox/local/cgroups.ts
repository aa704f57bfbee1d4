import fs from 'node:fs'
import path from 'node:path'
import type { SandboxLimits } from '../sandbox.ts'
import { readText, safeReaddir, sleep, type CgroupHost, type Controller } from './cgroup-host.ts'

export { detectCgroups, listGroups, type CgroupHost } from './cgroup-host.ts'

/** Emptied exec groups a sandbox keeps for its next commands (parked shells and spawns at once). */
const KEPT_EXECS = 4

/**
 * The host resources of one sandbox: a group per v1 hierarchy (or one v2 group) named
 * `<parent>/<name>`, holding every process of the sandbox. Exec calls get child groups in the
 * tracking hierarchy so one command's tree can be killed without touching background servers.
 */
export class SandboxCgroup {
  readonly host: CgroupHost
  private parent: string
  /** `<prefix><id>`: also names what else belongs to the sandbox on the host (its watcher's fence folder). */
  name: string
  private dirOf = new Map<Controller, string>()
  private execSeq = 0
  /**
   * Exec groups emptied by the commands that used them, for the next ones: a cgroup's rmdir (it
   * waits on the kernel's teardown, on the event loop) and mkdir measured most of a millisecond a
   * command here, reading one empty cgroup.procs a few microseconds. Only an empty group is kept,
   * and nothing joins it but a shell the service parks in it, so none of a command's processes
   * can be in the group the next command gets.
   */
  private emptyExecs = new Set<string>()

  constructor(host: CgroupHost, parent: string, name: string) {
    this.host = host
    this.parent = parent
    this.name = name
    this.place()
  }

  private place(): void {
    const { host } = this
    this.dirOf.clear()
    if (host.version === 1) for (const [c, mount] of host.mounts) this.dirOf.set(c, path.join(mount, this.parent, this.name))
    if (host.version === 2) for (const c of host.controllers) this.dirOf.set(c, path.join(host.root, this.parent, this.name))
  }

  /** One directory per hierarchy (v1) or one (v2); empty without cgroups. */
  get dirs(): string[] {
    if (this.host.version === 2) return [path.join(this.host.root, this.parent, this.name)]
    return [...new Set(this.dirOf.values())]
  }

  /** Where exec child groups go and where pids are listed: freezer first, as it makes kills atomic. */
  get trackDir(): string | null {
    if (this.host.version === 2) return this.dirs[0]!
    const track = (['freezer', 'pids', 'memory', 'cpu'] as Controller[]).find((c) => this.dirOf.has(c))
    return track ? this.dirOf.get(track)! : null
  }

  get freezeDir(): string | null {
    if (this.host.version === 2) return this.host.freeze ? this.dirs[0]! : null
    return this.dirOf.get('freezer') ?? null
  }

  /** Creates the groups, without limits yet (a warm group waits for its sandbox). */
  create(): void {
    if (this.host.version === 2) enableV2Controllers(this.host, path.join(this.host.root, this.parent))
    for (const dir of this.dirs) fs.mkdirSync(dir, { recursive: true })
  }

  /** Renames the groups in every hierarchy; their processes stay in them. */
  rename(name: string): void {
    const from = this.dirs
    this.name = name
    this.place()
    const to = this.dirs
    from.forEach((d, i) => fs.renameSync(d, to[i]!))
  }

  /** Writes the limits; returns the ones the host could not apply. */
  limit(limits: SandboxLimits): string[] {
    const unapplied: string[] = []
    const set = (c: Controller, file: string, value: string) => {
      const dir = this.dirOf.get(c)
      if (!dir || !fs.existsSync(path.join(dir, file))) return false
      fs.writeFileSync(path.join(dir, file), value)
      return true
    }
    const mem = String(Math.floor(limits.memoryBytes))
    const quota = Math.max(1000, Math.round(limits.cpus * 100_000))
    if (this.host.version === 1) {
      if (!set('memory', 'memory.limit_in_bytes', mem)) unapplied.push('memory')
      // Without it a host with swap lets the sandbox page out past its ceiling.
      if (this.host.memsw) set('memory', 'memory.memsw.limit_in_bytes', mem)
      if (!set('pids', 'pids.max', String(limits.pids))) unapplied.push('pids')
      if (!(set('cpu', 'cpu.cfs_period_us', '100000') && set('cpu', 'cpu.cfs_quota_us', String(quota)))) unapplied.push('cpu')
    } else if (this.host.version === 2) {
      if (!set('memory', 'memory.max', mem)) unapplied.push('memory')
      set('memory', 'memory.swap.max', '0')
      if (!set('pids', 'pids.max', String(limits.pids))) unapplied.push('pids')
      if (!set('cpu', 'cpu.max', `${quota} 100000`)) unapplied.push('cpu')
    } else {
      unapplied.push('memory', 'pids', 'cpu')
    }
    return unapplied
  }

  /**
   * cgroup.procs files a new process writes its pid into before it can fork: the sandbox's
   * groups, and in the tracking hierarchy the exec group `exec` when given.
   */
  procsFiles(exec: string | null = null): string[] {
    const track = this.trackDir
    return this.dirs.map((d) => path.join(d === track && exec ? path.join(d, exec) : d, 'cgroup.procs'))
  }

  /**
   * A child group of the tracking hierarchy for one exec call; returns its name (not its path:
   * a warm group is renamed once it gets its sandbox).
   */
  newExec(): string | null {
    if (!this.trackDir) return null
    for (const name of this.emptyExecs) {
      this.emptyExecs.delete(name)
      return name
    }
    const name = `exec-${++this.execSeq}`
    fs.mkdirSync(path.join(this.trackDir, name))
    return name
  }

  /** Every pid of the sandbox, or of one exec group, from the tracking hierarchy. */
  pids(exec: string | null = null): number[] {
    const track = this.trackDir
    return track ? listPids(exec ? path.join(track, exec) : track) : []
  }

  /** The sandbox's pids ceiling and how many it holds now; null without a pids ceiling. */
  pidsUse(): { max: number; current: number } | null {
    const dir = this.host.version === 2 ? this.dirs[0] : this.dirOf.get('pids')
    if (!dir) return null
    const max = Number(readText(path.join(dir, 'pids.max'))?.trim())
    const current = Number(readText(path.join(dir, 'pids.current'))?.trim())
    return Number.isFinite(max) && Number.isFinite(current) ? { max, current } : null
  }

  async freeze(): Promise<boolean> {
    if (!this.freezeDir) return false
    return setFrozen(this.host, this.freezeDir, true)
  }

  async thaw(): Promise<void> {
    if (this.freezeDir) await setFrozen(this.host, this.freezeDir, false)
  }

  /** Kills every process of one exec group (or of the whole sandbox). */
  async kill(exec: string | null = null): Promise<void> {
    const track = this.trackDir
    if (!track) return
    const dir = exec ? path.join(track, exec) : track
    // The tracking hierarchy is the freezer one whenever the host has a freezer.
    await killTree(this.host, dir, this.freezeDir ? dir : null)
  }

  /**
   * Releases an exec group once its processes are gone (kept for a next command, or removed);
   * false while background processes live on.
   */
  removeExec(exec: string): boolean {
    const track = this.trackDir
    if (!track) return true
    if (this.emptyExecs.has(exec)) return true
    if (this.emptyExecs.size < KEPT_EXECS) {
      const procs = readText(path.join(track, exec, 'cgroup.procs'))
      if (procs === '') {
        this.emptyExecs.add(exec)
        return true
      }
      if (procs === null) return true // gone already (the sandbox's groups were removed)
      return false
    }
    try {
      fs.rmdirSync(path.join(track, exec))
      return true
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ENOENT'
    }
  }

  /** Kills everything and removes every group of the sandbox. */
  async destroy(): Promise<void> {
    if (this.host.version === null) return
    this.emptyExecs.clear()
    // Every process sits in every hierarchy: killing through the freezing one is enough; the
    // other passes only catch a process that was between two cgroup.procs writes.
    const order = [this.trackDir!, ...this.dirs.filter((d) => d !== this.trackDir)]
    // A process still joining (its cgroup.procs write waits for an RCU grace period) shows up
    // only after the kill pass: kill again until every folder can go.
    for (let attempt = 0; ; attempt++) {
      for (const dir of order) {
        if (fs.existsSync(dir)) await killTree(this.host, dir, dir === this.freezeDir ? dir : null)
      }
      const left: string[] = []
      for (const dir of this.dirs) if (!(await removeTree(dir))) left.push(dir)
      if (left.length === 0) return
      if (attempt === 20) throw new Error(`cgroup ${left[0]} still holds processes`)
    }
  }
}

function listPids(dir: string): number[] {
  const out: number[] = []
  const walk = (d: string) => {
    const text = readText(path.join(d, 'cgroup.procs'))
    if (text === null) return
    for (const l of text.split('\n')) if (l) out.push(Number(l))
    for (const e of safeReaddir(d)) if (e.isDirectory()) walk(path.join(d, e.name))
  }
  walk(dir)
  return out
}

async function setFrozen(host: CgroupHost, dir: string, frozen: boolean): Promise<boolean> {
  const v2 = host.version === 2
  try {
    fs.writeFileSync(path.join(dir, v2 ? 'cgroup.freeze' : 'freezer.state'), v2 ? (frozen ? '1' : '0') : frozen ? 'FROZEN' : 'THAWED')
  } catch {
    return false
  }
  // The write starts freezing; tasks in uninterruptible sleep may take a moment to stop.
  const done = () =>
    v2
      ? (readText(path.join(dir, 'cgroup.events')) ?? '').includes(`frozen ${frozen ? 1 : 0}`)
      : (readText(path.join(dir, 'freezer.state')) ?? '').trim() === (frozen ? 'FROZEN' : 'THAWED')
  for (let i = 0; i < 400 && !done(); i++) await sleep(i < 20 ? 1 : 5)
  return done()
}

/**
 * Kills every process below `dir` until none is left. With a freezer (`freezeDir`) the group is
 * frozen first so a fork bomb cannot outrun the kill; cgroup v2 has cgroup.kill for that.
 */
async function killTree(host: CgroupHost, dir: string, freezeDir: string | null): Promise<void> {
  if (host.version === 2 && host.kill) {
    try {
      fs.writeFileSync(path.join(dir, 'cgroup.kill'), '1')
    } catch {
      /* already gone */
    }
  }
  for (let round = 0; round < 200; round++) {
    if (listPids(dir).length === 0) return
    const frozen = freezeDir !== null && (await setFrozen(host, freezeDir, true))
    for (const pid of listPids(dir)) {
      try {
        process.kill(pid, 'SIGKILL')
      } catch {
        /* exited meanwhile */
      }
    }
    // Frozen tasks take their SIGKILL only once thawed.
    if (frozen) await setFrozen(host, freezeDir, false)
    await sleep(round < 10 ? 2 : 10)
  }
}

/** Removes `dir` and its child groups; false while one still holds a process. */
async function removeTree(dir: string): Promise<boolean> {
  let ok = true
  for (const e of safeReaddir(dir)) if (e.isDirectory()) ok = (await removeTree(path.join(dir, e.name))) && ok
  for (let i = 0; ok && i < 20; i++) {
    try {
      fs.rmdirSync(dir)
      return true
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'ENOENT') return true
      // Killed processes leave the group a moment after they die.
      if (code !== 'EBUSY') throw err
      await sleep(5)
    }
  }
  return false
}

function enableV2Controllers(host: CgroupHost & { version: 2 }, parentDir: string): void {
  fs.mkdirSync(parentDir, { recursive: true })
  const want = [...host.controllers].filter((c) => c !== 'freezer').map((c) => `+${c}`)
  // Each level down from the root must pass the controllers on.
  const rel = path.relative(host.root, parentDir).split(path.sep).filter(Boolean)
  let dir = host.root
  for (const part of ['', ...rel]) {
    dir = path.join(dir, part)
    const enabled = (readText(path.join(dir, 'cgroup.subtree_control')) ?? '').split(/\s+/)
    const missing = want.filter((w) => !enabled.includes(w.slice(1)))
    if (missing.length) fs.writeFileSync(path.join(dir, 'cgroup.subtree_control'), missing.join(' '))
  }
}

