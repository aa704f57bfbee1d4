import { randomBytes } from 'node:crypto'
import { logFailure, silentLog, type Log } from '../../shared/log.ts'
import type { Tools } from './bubblewrap.ts'
import type { CgroupHost } from './cgroups.ts'
import { SandboxCgroup } from './cgroups.ts'
import { parkExec, type Parked } from './parked.ts'
import { parkInit } from './sandbox-init.ts'

/**
 * What a sandbox needs before it knows who it is: its cgroups, and two root shells parked in
 * them (one to become the init, one the first command). Kept warm so that create only renames
 * the groups, writes the limits and hands the shells their command lines (see parked.ts).
 */
export type WarmSlot = { cgroup: SandboxCgroup; init: Parked; exec: Parked; execGroup: string | null }

export async function makeSlot(host: CgroupHost, parent: string, name: string, tools: Tools): Promise<WarmSlot> {
  const cgroup = new SandboxCgroup(host, parent, name)
  cgroup.create()
  const init = parkInit(tools, cgroup.procsFiles())
  const execGroup = cgroup.newExec()
  const slot = { cgroup, init, exec: parkExec(tools, cgroup.procsFiles(execGroup)), execGroup }
  try {
    await Promise.all([init.ready, slot.exec.ready])
  } catch (err) {
    await dropSlot(slot)
    throw err
  }
  return slot
}

/** Kills the parked shells and removes the groups. */
export async function dropSlot(slot: WarmSlot): Promise<void> {
  for (const p of [slot.init, slot.exec]) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL')
  await slot.cgroup.destroy()
}

const REFILL_DELAY_MS = 100

export class WarmPool {
  private size: number
  private make: (name: string) => Promise<WarmSlot>
  private prefix: string
  private log: Log
  private slots: Array<{ name: string; slot: WarmSlot }> = []
  /** Names of groups being made or waiting: cleanupOrphans must leave them alone. */
  readonly names = new Set<string>()
  private filling: Promise<void> | null = null
  private closed = false
  private timer: NodeJS.Timeout | undefined

  constructor(size: number, prefix: string, make: (name: string) => Promise<WarmSlot>, log: Log = silentLog) {
    this.size = size
    this.log = log
    this.prefix = prefix
    this.make = make
  }

  /** A warm slot, renamed to nothing yet; null when none is ready. Starts a refill either way. */
  take(): WarmSlot | null {
    let found: WarmSlot | null = null
    while (!found && this.slots.length) {
      const { name, slot } = this.slots.shift()!
      this.names.delete(name)
      if (slot.init.usable() && slot.exec.usable()) found = slot
      // Left behind, its group (it carries the prefix) waits for the next start's orphan clean-up.
      else void dropSlot(slot).catch(logFailure(this.log, 'dropping a dead warm slot failed', { component: 'sandbox', group: name }))
    }
    // Later, not now: making a slot forks the service twice (a few ms of its event loop each)
    // while the sandbox being made still needs it.
    clearTimeout(this.timer)
    this.timer = setTimeout(() => this.refill(), REFILL_DELAY_MS).unref()
    return found
  }

  refill(): void {
    if (this.closed || this.filling || this.slots.length >= this.size) return
    this.filling = (async () => {
      while (!this.closed && this.slots.length < this.size) {
        // `~` never appears in a sandbox's own group name (see LocalSandboxProvider.groupName).
        const name = `${this.prefix}~warm-${randomBytes(6).toString('hex')}`
        this.names.add(name)
        try {
          const slot = await this.make(name)
          if (this.closed) await dropSlot(slot)
          else this.slots.push({ name, slot })
        } catch {
          this.names.delete(name)
          return
        }
      }
    })().finally(() => {
      this.filling = null
    })
  }

  /** Fills the pool now; resolves once it is full (or cannot be filled). */
  async fill(): Promise<void> {
    clearTimeout(this.timer)
    this.refill()
    while (this.filling) await this.filling
  }

  async close(): Promise<void> {
    this.closed = true
    clearTimeout(this.timer)
    await this.filling
    const slots = this.slots.splice(0)
    await Promise.allSettled(slots.map((s) => dropSlot(s.slot)))
    this.names.clear()
  }
}
