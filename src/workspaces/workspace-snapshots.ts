import { lockKey, type Db, type Store } from '../db/database.ts'
import type { BlobStore } from '../artifacts/blob-store.ts'
import type { SandboxProvider } from '../sandbox/sandbox.ts'
import { blobInUse, deleteSnapshot, getSnapshot, putSnapshot, snapshotsOfDeletedSessions, unnamedSnapshotBlobs } from './workspace-snapshots.store.ts'

/** Largest snapshot kept: past it a save fails (BlobTooLarge) and the snapshot before stays. */
export const SNAPSHOT_MAX_BYTES = 8 * 1024 ** 3
/** A save whose blob a concurrent release removed packs again; more than this many times is a fault. */
const SAVE_ATTEMPTS = 3
/**
 * How old an unnamed snapshot blob must be before a sweep removes it: well past any save between
 * its put and the row that names it (a save that loses its blob to a sweep packs again anyway).
 */
const SWEEP_GRACE_MS = 10 * 60_000
/** Rows looked at per query of a sweep; the next sweep takes up what is left. */
const SWEEP_BATCH = 100

export type SnapshotInfo = { takenAt: number; bytes: number }

/**
 * Copies of session workspaces kept where every node reaches them, so that a workspace survives
 * the loss of the node that ran it: its latest snapshot is unpacked on the node that takes over.
 */
export type WorkspaceSnapshots = {
  /**
   * Packs the session's workspace (provider.packWorkspace: links kept as links, modes, empty
   * folders, `.git` and `node_modules` too) into the blob store and makes it the session's snapshot,
   * then removes the previous one's bytes unless another snapshot names them. Resolves null when
   * the session has no workspace to pack. Rejects when packing or storing fails (BlobTooLarge past
   * SNAPSHOT_MAX_BYTES); the previous snapshot then stays the latest. `guard` runs in the
   * transaction that names the new snapshot, before it does: whatever it throws (LostOwnership,
   * from the fence of the turn that saves) is thrown here, the snapshot before stays and the packed
   * bytes are released.
   */
  save(sessionId: string, guard?: (trx: Db) => Promise<void>): Promise<SnapshotInfo | null>
  /**
   * Unpacks the latest snapshot into the session's workspace, to be called before a sandbox is
   * created over it. Resolves true when restored; false when there is no snapshot (or its bytes
   * are gone), or when the workspace is not missing or empty or a sandbox of it is up (nothing is
   * written then). Rejects when unpacking fails, the workspace left as it was.
   */
  restore(sessionId: string): Promise<boolean>
  /** The latest snapshot's time and size, or null when there is none. */
  latest(sessionId: string): Promise<SnapshotInfo | null>
  /** Removes the session's snapshot and its bytes (unless another snapshot names them). Idempotent. */
  drop(sessionId: string): Promise<void>
  /**
   * Removes what a node that stopped half way left: snapshots of deleted sessions, and snapshot
   * bytes that no snapshot names (one replaced or dropped, its bytes not yet released). Called
   * now and then by any node; resolves how many of each it removed.
   */
  sweep(): Promise<{ sessions: number; blobs: number }>
}

export type SnapshotDeps = {
  store: Store
  provider: SandboxProvider
  /** The snapshots' own key space, apart from artifacts: releasing a snapshot never takes an artifact's bytes. */
  blobs: BlobStore
  maxBytes?: number
}

/**
 * Snapshots in the database-backed blob store on PostgreSQL; on SQLite (one process on one host)
 * in the blob store's local files, which a save does not have to push through SQLite's single
 * writer. One row per session (workspace_snapshots) names the blob.
 *
 * Blobs are content-addressed, so two snapshots may name one blob. Naming a blob and releasing it
 * take the same per-key lock (an advisory lock on PostgreSQL, SQLite's single writer otherwise):
 * a release deletes only what no row names, and a save that finds its blob deleted between its put
 * and its row packs again.
 */
export function workspaceSnapshots(deps: SnapshotDeps): WorkspaceSnapshots {
  const { store, provider, blobs } = deps
  const maxBytes = deps.maxBytes ?? SNAPSHOT_MAX_BYTES
  const queues = new Map<string, Promise<unknown>>()
  // One operation on a session's snapshot at a time in this process (a save and a drop must not cross).
  const serial = <T>(id: string, op: () => Promise<T>): Promise<T> => {
    const next = (queues.get(id) ?? Promise.resolve()).then(op, op)
    const settled = next.catch(() => {}) // the queue only orders: the caller gets `next` and its failure
    queues.set(id, settled)
    void settled.then(() => {
      if (queues.get(id) === settled) queues.delete(id)
    })
    return next
  }
  const lockBlob = (trx: Store['db'], key: string) => lockKey(trx, store.dialect, `blob:snapshots:${key}`)

  /** Deletes the blob unless a snapshot names it; resolves whether it did. */
  async function release(key: string): Promise<boolean> {
    return store.db.transaction().execute(async (trx) => {
      await lockBlob(trx, key)
      if (await blobInUse(trx, key)) return false
      await blobs.delete(key)
      return true
    })
  }

  async function save(sessionId: string, guard?: (trx: Db) => Promise<void>): Promise<SnapshotInfo | null> {
    for (let attempt = 1; ; attempt++) {
      const archive = await provider.packWorkspace(sessionId)
      if (!archive) return null
      const blob = await blobs.put(archive, maxBytes)
      const takenAt = Date.now()
      let refused: unknown = null
      const previous = await store.db.transaction().execute(async (trx) => {
        await lockBlob(trx, blob.key)
        if (!(await blobs.exists(blob.key))) return undefined
        if (guard) {
          try {
            await guard(trx)
          } catch (err) {
            refused = err
            return null
          }
        }
        const before = await getSnapshot(trx, sessionId)
        await putSnapshot(trx, { sessionId, blobKey: blob.key, takenAt, bytes: blob.size })
        return before
      })
      if (refused) {
        // Bytes no snapshot names: released now rather than left to the sweep (another may name them).
        await release(blob.key)
        throw refused
      }
      if (previous === undefined) {
        if (attempt < SAVE_ATTEMPTS) continue
        throw new Error(`the snapshot of ${sessionId} was removed ${SAVE_ATTEMPTS} times as it was stored`)
      }
      if (previous && previous.blobKey !== blob.key) await release(previous.blobKey)
      return { takenAt, bytes: blob.size }
    }
  }

  async function restore(sessionId: string): Promise<boolean> {
    const snap = await getSnapshot(store.db, sessionId)
    if (!snap) return false
    const archive = await blobs.open(snap.blobKey)
    if (!archive) return false
    try {
      return await provider.unpackWorkspace(sessionId, archive)
    } finally {
      archive.destroy()
    }
  }

  const drop = (id: string) =>
    serial(id, async () => {
      const key = await deleteSnapshot(store.db, id)
      if (key) await release(key)
    })

  return {
    save: (id, guard) => serial(id, () => save(id, guard)),
    restore: (id) => serial(id, () => restore(id)),
    async latest(id) {
      const snap = await getSnapshot(store.db, id)
      return snap ? { takenAt: snap.takenAt, bytes: snap.bytes } : null
    },
    drop,
    async sweep() {
      const deleted = await snapshotsOfDeletedSessions(store.db, SWEEP_BATCH)
      for (const id of deleted) await drop(id)
      const unnamed = await unnamedSnapshotBlobs(store.db, Date.now() - SWEEP_GRACE_MS, SWEEP_BATCH)
      let removed = 0
      // release looks again under the blob's lock: a save that named it meanwhile keeps it.
      for (const key of unnamed) if (await release(key)) removed++
      return { sessions: deleted.length, blobs: removed }
    },
  }
}
