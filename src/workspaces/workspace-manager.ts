import { EventEmitter } from 'node:events'
import type { Deps } from '../deps.ts'
import { ApiError } from '../errors.ts'
import { withEvents } from '../events/record-event.ts'
import { getProfileEnv } from '../environments/environments.store.ts'
import { SandboxImageError, type Sandbox, type SandboxProvider, type WorkspaceReader } from '../sandbox/sandbox.ts'
import { limiter } from '../shared/limiter.ts'
import type { Log } from '../shared/log.ts'
import { imageProgressRecorder } from './image-progress.ts'
import { networkPolicyFor } from './network-policy.ts'
import type { WorkspaceSnapshots } from './workspace-snapshots.ts'
import { seedWorkspace } from './seed-workspace.ts'
import { tellTakenOver } from './taken-over-note.ts'
import { filesOnReturn } from './workspace-return.ts'
import { fencedSandboxes } from './fenced-sandbox.ts'
import { checkFence, LostOwnership, type Fence } from '../nodes/ownership.store.ts'
import { isStoreUnreachable, type Db } from '../db/database.ts'
import { closeInterval, getWorkspace, markOpenIntervalsForReview, openInterval, patchWorkspace, type WorkspaceState } from './workspaces.store.ts'

export const WORKSPACE_MOUNT = '/workspace'

type Entry = {
  sandbox: Sandbox | null
  /** Running ms used before the current running stretch (the lifetime counts running time only). */
  usedMs: number
  runningSince: number | null
  lastActivity: number
  /**
   * When its sandbox was last asked for (commands, file writes): what may have changed its files.
   * A driver's hold is not, so a turn's end alone does not make the snapshot taken after it stale.
   */
  usedAt: number
  holds: number
  /** Operations on one workspace run one after another. */
  queue: Promise<unknown>
  /** Aborted by destroy: a bring-up still waiting for its turn gives up at once. */
  gone: AbortController
  /** When its snapshot was last taken (0: never by this node): one is due once it was used since. */
  snapshotAt: number
  /** Taken up from another node and not brought up here since: a workspace with nothing to restore is rebuilt. */
  takenOver: boolean
}

/**
 * Owns every workspace of this process: brings one up in the background when its session is
 * created, pauses it when idle, reclaims it at the lifetime ceiling, restores it on the next
 * input, and records each move with its event and usage interval. Idle tracking, lifetime and
 * usage belong here, not to the sandbox provider.
 */
export type WorkspaceManager = {
  /** Starts bringing the session's workspace up; the caller does not wait. */
  start(sessionId: string): void
  /** A running sandbox for the session: resumes a paused one, restores a reclaimed one. Counts as activity. */
  acquire(sessionId: string): Promise<Sandbox>
  /**
   * The session's sandbox when this process has one up, resumed if it was paused; null when none is
   * (not started yet, reclaimed, failed). Counts as activity. Unlike acquire it never starts one.
   */
  live(sessionId: string): Promise<Sandbox | null>
  /** Keeps the workspace from idling until the returned function is called. */
  hold(sessionId: string): () => void
  /** Counts as activity (preview traffic, say). */
  touch(sessionId: string): void
  /** Runs `fn` before a workspace pauses (and is awaited): what must not be frozen stops first. */
  onPause(fn: (sessionId: string) => Promise<void>): void
  /** Fires with the session id when its sandbox is about to be reclaimed at the lifetime ceiling. */
  readonly reclaimed: EventEmitter<{ reclaimed: [string] }>
  /**
   * Saves the workspace where every node reaches it (a turn settled), in the workspace's queue of
   * operations, when it was used since the last save; does nothing without shared storage.
   */
  snapshot(sessionId: string): void
  /**
   * Saves the workspace where every node reaches it now, when it was used since the last save,
   * and resolves once it is stored: a turn is reported settled only after what it changed is kept,
   * so that no later loss of this node takes it back. Resolves at once without shared storage or
   * with no sandbox of the session here. The snapshot is named only while `fence` holds (checked in
   * the transaction that names it): rejects LostOwnership otherwise, and when the store cannot be
   * reached (the driver tries again). A save that fails for any other reason (a workspace past the
   * snapshot ceiling) is logged and the snapshot before stays. With `restore`, a workspace taken
   * over and not brought up here since comes back first: the calls of a turn about to complete ran
   * on the node that was lost, and the model must learn (the takeover note, steered into the turn,
   * keeps it open) rather than the turn complete over a workspace without their changes.
   */
  keep(sessionId: string, fence: Fence, opts?: { restore?: boolean }): Promise<void>
  /** Destroys the sandbox and the workspace files (session deleted). */
  destroy(sessionId: string): Promise<void>
  /** Reads of the session's workspace whether or not its sandbox is up (publication after a turn, or after a restart). */
  files(sessionId: string): WorkspaceReader
  /** At service start: clears what a crashed run of this node left on the host. */
  recover(): Promise<void>
  /**
   * Takes up the workspace of a session this node just claimed: a sandbox its last owner ran is
   * gone (reclaimed: its files come back on the next input), its open usage is marked for review,
   * an owed workspace is started. True when one is owed or already up here.
   */
  adopt(sessionId: string): Promise<boolean>
  /** The node lost its leases: every sandbox is destroyed and forgotten (with snapshots, its files too: they are stale), and nothing is written. */
  abandon(): Promise<void>
  close(): Promise<void>
}

export type WorkspaceManagerDeps = Pick<Deps, 'store' | 'bus' | 'config' | 'box'> & {
  provider: SandboxProvider
  /** Copies every node reaches (several nodes on PostgreSQL): saved at pause, settle and stop, restored on takeover. */
  snapshots?: WorkspaceSnapshots
  log?: Log
  /**
   * Whether this node may act as an owner now (its last renewal of its leases is recent): false
   * when it was paused or cut from the store past its lease. Asked at the moment of each act on a
   * sandbox, so that a node woken after losing its sessions starts nothing in them.
   */
  leaseHeld?: () => true | Promise<boolean>
  /**
   * The live node that owns the session when it is not this one (null: this one, claimed if nobody
   * live held it). Asked by acquire, which brings a sandbox up: whatever the caller (a request, a
   * turn), one workspace never runs on two nodes.
   */
  ownerElsewhere?: (sessionId: string) => Promise<string | null>
}

export function workspaceManager(deps: WorkspaceManagerDeps): WorkspaceManager {
  const { store, bus, config, box, provider, snapshots } = deps
  const entries = new Map<string, Entry>()
  const reclaimed = new EventEmitter<{ reclaimed: [string] }>()
  const pauseHooks: ((id: string) => Promise<void>)[] = []
  // A burst of creates must not start a burst of sandboxes: each start forks and writes cgroup
  // files on this process's event loop, which the API's own requests share.
  const starting = limiter(config.sandboxStarts)
  const held = deps.leaseHeld ?? (() => true)
  const fenced = fencedSandboxes(held)

  const entryOf = (id: string): Entry => {
    let e = entries.get(id)
    if (!e) entries.set(id, (e = { sandbox: null, usedMs: 0, runningSince: null, lastActivity: Date.now(), usedAt: Date.now(), holds: 0, queue: Promise.resolve(), gone: new AbortController(), snapshotAt: 0, takenOver: false }))
    return e
  }
  const serial = <T>(id: string, op: () => Promise<T>): Promise<T> => {
    const e = entryOf(id)
    const next = e.queue.then(op, op)
    e.queue = next.catch(() => {}) // the queue only orders: the caller gets `next` and its failure
    return next
  }

  async function setState(id: string, orgId: string, state: WorkspaceState, event: 'sandbox.created' | 'sandbox.paused' | 'sandbox.resumed' | 'workspace.recovery_failed' | null, extra: Record<string, unknown> = {}, usage?: 'open' | 'close'): Promise<void> {
    const now = Date.now()
    await withEvents(store, bus, async (trx, record) => {
      await patchWorkspace(trx, id, { state, ...extra }, now)
      if (usage === 'open') await openInterval(trx, orgId, id, now)
      if (usage === 'close') await closeInterval(trx, id, now)
      if (event) await record({ orgId, sessionId: id, type: event, payload: event === 'workspace.recovery_failed' ? { message: String(extra.message ?? '') } : { state } })
    })
  }

  /** Creates a fresh sandbox over the kept workspace folder; seeds it the first time. */
  async function bringUp(id: string): Promise<Sandbox | null> {
    const ws = await getWorkspace(store.db, id)
    if (!ws) return null
    const e = entryOf(id)
    const restoring = ws.env.state === 'reclaimed' || ws.env.state === 'failed'
    try {
      const env = await getProfileEnv(store.db, box, ws.orgId, ws.env.profiles ?? [])
      const { restored, rebuilding } = restoring && ws.env.initialized ? await filesOnReturn({ provider, snapshots }, id, e.takenOver) : { restored: null, rebuilding: false }
      const seeding = !ws.env.initialized || rebuilding
      const image = ws.env.image ?? null
      // What the image's pull has got to, recorded as it comes (the workspace is pending meanwhile).
      const progress = image ? imageProgressRecorder({ store, bus, log: deps.log, sessionId: id, orgId: ws.orgId, pending: ws.env.state === 'pending' }) : null
      const sandbox = await starting(
        () =>
          provider.create({
            id,
            existing: restoring && !seeding,
            workspaceMount: WORKSPACE_MOUNT,
            env,
            network: networkPolicyFor(config, ws.agent.permission_rules ?? []),
            limits: { memoryBytes: config.sandboxMemoryMb * 1024 * 1024, pids: config.sandboxPids, cpus: config.sandboxCpus },
            // Pinned once recorded: a restore or a takeover starts the very image the first start ran.
            ...(image ? { image: image.digest ? { ref: image.ref, digest: image.digest } : { ref: image.ref }, onImageProgress: progress!.report } : {}),
          }),
        e.gone.signal,
      ).finally(async () => {
        // Whatever was reported is recorded before what follows (sandbox.created, or the failure).
        progress?.close()
        await progress?.settled()
      })
      e.sandbox = sandbox
      e.takenOver = false
      e.runningSince = Date.now()
      e.usedMs = restoring ? 0 : (ws.env.used_ms ?? 0)
      e.lastActivity = Date.now()
      // The digest the image resolved to is the session's from its first start on.
      const resolved = image && !image.digest && sandbox.image?.digest ? { image: { ref: image.ref, digest: sandbox.image.digest } } : {}
      await setState(id, ws.orgId, 'running', 'sandbox.created', { used_ms: e.usedMs, ...resolved }, 'open')
      e.snapshotAt = Date.now()
      if (restored) await tellTakenOver(store, bus, id, ws.orgId, `restored to its state at ${new Date(restored.takenAt).toISOString()} (its last snapshot)`, restored.takenAt)
      if (seeding) {
        const { problems, repo } = await seedWorkspace(store.db, id, ws.env, sandbox, config.gitBaseUrl)
        await withEvents(store, bus, async (trx, record) => {
          await patchWorkspace(trx, id, { initialized: true, repo })
          for (const p of problems) await record({ orgId: ws.orgId, sessionId: id, type: 'session.error', payload: { message: p.message, ...(p.path ? { path: p.path } : {}) } })
        })
      }
      if (rebuilding) await tellTakenOver(store, bus, id, ws.orgId, 'rebuilt from the state it was created in (its repository, seed files and template setup), since no snapshot of it had been taken yet', null)
      return sandbox
    } catch (err) {
      // Deleted while it waited for its turn: nothing was started and there is nothing to report.
      if (e.gone.signal.aborted && e.sandbox === null) return null
      // Whatever got started is stopped and its time closed: a failed workspace holds nothing.
      const started = e.sandbox !== null
      if (e.sandbox) await e.sandbox.destroy().catch((err) => deps.log?.warn({ err, component: 'workspaces', session_id: id }, 'destroying the sandbox of a failed start failed'))
      e.sandbox = null
      e.runningSince = null
      const imageFailed = err instanceof SandboxImageError
      const reason = imageFailed ? `its image ${ws.env.image?.ref ?? ''} could not be had: ${(err as Error).message}` : (err as Error).message
      const message = restoring ? `The workspace could not be restored: ${reason}` : `The workspace could not be started: ${reason}`
      await setState(id, ws.orgId, 'failed', 'workspace.recovery_failed', { message }, started ? 'close' : undefined)
      // An image that cannot be had is the session's to change (another reference, a registry
      // reachable again), not the service failing: a 400, never a 5xx.
      throw new ApiError(imageFailed ? 'invalid_request' : restoring ? 'workspace_recovery_failed' : 'sandbox_unavailable', message, { cause: err })
    }
  }

  /**
   * Saves a snapshot when the workspace was used since the last one; a failure keeps the one before.
   * With `guard` (a turn's fence) a refusal and an unreachable store are thrown to the caller.
   */
  async function save(id: string, guard?: (trx: Db) => Promise<void>): Promise<void> {
    const e = entries.get(id)
    if (!snapshots || !e?.sandbox || e.sandbox.state === 'destroyed' || e.usedAt < e.snapshotAt) return
    const at = Date.now()
    try {
      await snapshots.save(id, guard)
      e.snapshotAt = at
    } catch (err) {
      if (guard && (err instanceof LostOwnership || isStoreUnreachable(err))) throw err
      deps.log?.warn({ err, component: 'workspaces', session_id: id }, 'saving the workspace snapshot failed; the one before stays')
    }
  }

  async function ensureRunning(id: string): Promise<Sandbox> {
    const e = entryOf(id)
    e.lastActivity = e.usedAt = Date.now()
    if (e.sandbox?.state === 'running') return e.sandbox
    if (e.sandbox?.state === 'paused') {
      const ws = await getWorkspace(store.db, id)
      if (!ws) throw new ApiError('not_found', `No session with id "${id}".`)
      await e.sandbox.resume()
      e.runningSince = Date.now()
      await setState(id, ws.orgId, 'running', 'sandbox.resumed', {}, 'open')
      return e.sandbox
    }
    if (e.sandbox?.state === 'destroyed') {
      // It ended without the manager's doing (its cgroups removed by another process, say): its
      // running time ends now, before the sandbox that replaces it opens an interval of its own.
      e.sandbox = null
      e.runningSince = null
      await closeInterval(store.db, id, Date.now())
    }
    const sandbox = await bringUp(id)
    if (!sandbox) throw new ApiError('not_found', `No session with id "${id}".`)
    return sandbox
  }

  async function pause(id: string): Promise<void> {
    const e = entries.get(id)
    if (!e?.sandbox || e.sandbox.state !== 'running' || e.holds > 0) return
    if (Date.now() - e.lastActivity < config.idlePauseMs) return
    const ws = await getWorkspace(store.db, id)
    if (!ws) return
    for (const hook of pauseHooks) await hook(id).catch((err) => deps.log?.warn({ err, component: 'workspaces', session_id: id }, 'closing what a pausing workspace had open failed'))
    await e.sandbox.pause()
    e.usedMs += Date.now() - (e.runningSince ?? Date.now())
    e.runningSince = null
    await setState(id, ws.orgId, 'paused', 'sandbox.paused', { used_ms: e.usedMs }, 'close')
    // Frozen: the copy is of one moment.
    await save(id)
  }

  async function reclaim(id: string): Promise<void> {
    const e = entries.get(id)
    if (!e?.sandbox || e.sandbox.state !== 'running') return
    const ws = await getWorkspace(store.db, id)
    // Told first, so that whatever runs there is stopped as cut short rather than found dead.
    reclaimed.emit('reclaimed', id)
    await e.sandbox.destroy()
    e.sandbox = null
    e.runningSince = null
    e.usedMs = 0
    if (ws) await setState(id, ws.orgId, 'reclaimed', null, { used_ms: 0 }, 'close')
  }

  /**
   * Runs a move the node makes on its own (a pause, a reclaim, a snapshot) in the workspace's
   * queue, only while it holds its leases: its timer fires first on waking from a pause past them,
   * and must neither record a move nor replace the snapshot of a session another node now runs.
   * Asked before joining the queue: a renewal waits for the node's round, which may wait for it.
   */
  const whileHeld = async (id: string, move: () => Promise<void>): Promise<void> => {
    if (await held()) await serial(id, move).catch((err) => deps.log?.warn({ err, component: 'workspaces', session_id: id }, 'a workspace move (a pause, a reclaim, a snapshot) failed; a pause or reclaim is tried again at the next tick'))
  }

  const tick = () => {
    const now = Date.now()
    for (const [id, e] of entries) {
      if (e.sandbox?.state !== 'running') continue
      const used = e.usedMs + (now - (e.runningSince ?? now))
      if (used >= config.workspaceLifetimeMs) void whileHeld(id, () => reclaim(id))
      else if (e.holds === 0 && now - e.lastActivity >= config.idlePauseMs) void whileHeld(id, () => pause(id))
    }
  }
  const timer = setInterval(tick, Math.max(10, Math.min(1000, Math.floor(Math.min(config.idlePauseMs, config.workspaceLifetimeMs) / 4))))
  timer.unref()

  const start = (id: string) => void serial(id, () => ensureRunning(id)).catch((err) => deps.log?.warn({ err, component: 'workspaces', session_id: id }, 'starting a workspace ahead of its use failed; its use starts it again'))
  return {
    start,
    async acquire(id) {
      if (!(await held())) throw new LostOwnership(id)
      const owner = await deps.ownerElsewhere?.(id)
      if (owner) throw new LostOwnership(id, owner)
      return fenced(id, await serial(id, () => ensureRunning(id)))
    },
    live(id) {
      const e = entries.get(id)
      if (!e?.sandbox || e.sandbox.state === 'destroyed') return Promise.resolve(null)
      // The common case (a running sandbox) answers without joining the queue of operations.
      if (e.sandbox.state === 'running') {
        e.lastActivity = e.usedAt = Date.now()
        return Promise.resolve(fenced(id, e.sandbox))
      }
      return serial(id, async () => (entries.get(id)?.sandbox ? fenced(id, await ensureRunning(id)) : null))
    },
    hold(id) {
      const e = entryOf(id)
      e.holds++
      e.lastActivity = Date.now()
      let released = false
      return () => {
        if (released) return
        released = true
        e.holds--
        e.lastActivity = Date.now()
      }
    },
    touch(id) {
      const e = entryOf(id)
      e.lastActivity = e.usedAt = Date.now()
    },
    onPause: (fn) => void pauseHooks.push(fn),
    reclaimed,
    files: (id) => provider.workspace(id),
    snapshot(id) {
      if (snapshots && entries.has(id)) void whileHeld(id, () => save(id))
    },
    async keep(id, fence, opts = {}) {
      if (!snapshots || !entries.has(id)) return
      if (opts.restore && entries.get(id)?.takenOver) {
        try {
          await serial(id, () => ensureRunning(id))
        } catch (err) {
          // A workspace that cannot come back is recorded as failed by its bring-up; the turn ends.
          if (err instanceof LostOwnership || isStoreUnreachable(err)) throw err
          deps.log?.warn({ err, component: 'workspaces', session_id: id }, 'the workspace taken over could not be brought back before its turn settled')
        }
      }
      await serial(id, () => save(id, (trx) => checkFence(trx, store.dialect, fence, true)))
    },
    destroy: (id) => {
      entries.get(id)?.gone.abort()
      return serial(id, async () => {
        const e = entries.get(id)
        entries.delete(id)
        await e?.sandbox?.destroy()
        await closeInterval(store.db, id, Date.now())
        await provider.deleteWorkspace(id)
        await snapshots?.drop(id)
      })
    },
    async recover() {
      await provider.cleanupOrphans()
    },
    adopt: (id) =>
      serial(id, async () => {
        const e = entries.get(id)
        if (e?.sandbox && e.sandbox.state !== 'destroyed') return true
        const ws = await getWorkspace(store.db, id)
        if (!ws) return false
        entryOf(id).takenOver = true
        await markOpenIntervalsForReview(store.db, id)
        if (ws.env.state === 'running' || ws.env.state === 'paused') await patchWorkspace(store.db, id, { state: 'reclaimed', used_ms: 0 })
        if (ws.env.state !== 'pending') return false
        // Owed and never brought up (its creator stopped first): it comes up here, after this.
        start(id)
        return true
      }),
    async abandon() {
      const all = [...entries.entries()]
      entries.clear()
      for (const [, e] of all) e.gone.abort()
      await Promise.allSettled(all.map(([, e]) => e.sandbox?.destroy()))
      // Other nodes run these sessions now, from their snapshots: the copies here are stale, and
      // nothing else would remove them (a session's deletion reaches the node that owns it).
      if (snapshots) await Promise.allSettled(all.map(([id]) => provider.deleteWorkspace(id)))
    },
    async close() {
      clearInterval(timer)
      await Promise.allSettled([...entries.values()].map((e) => e.queue))
      // A clean stop closes its usage intervals; only a crash leaves them for review. The files go
      // where the node taking the session over finds them.
      for (const [id, e] of entries) {
        if (!e.sandbox || e.sandbox.state === 'destroyed') continue
        await save(id)
        await closeInterval(store.db, id, Date.now()).catch((err) => deps.log?.warn({ err, component: 'workspaces', session_id: id }, 'closing the running time of an abandoned workspace failed'))
        await patchWorkspace(store.db, id, { state: 'reclaimed', used_ms: 0 }).catch((err) => deps.log?.warn({ err, component: 'workspaces', session_id: id }, 'recording an abandoned workspace reclaimed failed'))
      }
      await provider.close()
    },
  }
}
