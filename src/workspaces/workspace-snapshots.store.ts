import type { Db } from '../db/database.ts'

/** The latest snapshot of a session's workspace: its bytes are the blob `blobKey` of the snapshot store. */
export type SnapshotRow = { sessionId: string; blobKey: string; takenAt: number; bytes: number }

type Row = { session_id: string; blob_key: string; taken_at: number; bytes: number }
const toSnapshot = (r: Row): SnapshotRow => ({ sessionId: r.session_id, blobKey: r.blob_key, takenAt: Number(r.taken_at), bytes: Number(r.bytes) })

export async function getSnapshot(db: Db, sessionId: string): Promise<SnapshotRow | null> {
  const row = await db.selectFrom('workspace_snapshots').selectAll().where('session_id', '=', sessionId).executeTakeFirst()
  return row ? toSnapshot(row) : null
}

/** Makes `snap` the session's snapshot, replacing the one before. */
export async function putSnapshot(db: Db, snap: SnapshotRow): Promise<void> {
  const values = { session_id: snap.sessionId, blob_key: snap.blobKey, taken_at: snap.takenAt, bytes: snap.bytes }
  await db
    .insertInto('workspace_snapshots')
    .values(values)
    .onConflict((oc) => oc.column('session_id').doUpdateSet({ blob_key: values.blob_key, taken_at: values.taken_at, bytes: values.bytes }))
    .execute()
}

/** Removes the session's snapshot row; resolves the blob it named, or null when it had none. */
export async function deleteSnapshot(db: Db, sessionId: string): Promise<string | null> {
  const row = await db.deleteFrom('workspace_snapshots').where('session_id', '=', sessionId).returning('blob_key').executeTakeFirst()
  return row?.blob_key ?? null
}

/** Whether any snapshot still names the blob (two sessions' identical archives share one). */
export async function blobInUse(db: Db, blobKey: string): Promise<boolean> {
  const row = await db.selectFrom('workspace_snapshots').select('session_id').where('blob_key', '=', blobKey).limit(1).executeTakeFirst()
  return row !== undefined
}

/** Sessions deleted whose snapshot row is still there (a node stopped between the deletion's commit and its drop). */
export async function snapshotsOfDeletedSessions(db: Db, limit: number): Promise<string[]> {
  const rows = await db
    .selectFrom('workspace_snapshots')
    .innerJoin('sessions', 'sessions.id', 'workspace_snapshots.session_id')
    .select('workspace_snapshots.session_id')
    .where('sessions.deleted_at', 'is not', null)
    .limit(limit)
    .execute()
  return rows.map((r) => r.session_id)
}

/**
 * Snapshot blobs stored before `before` that no snapshot names: the bytes of a snapshot replaced
 * or dropped by a node that stopped before it released them, or of a save that never named its blob.
 */
export async function unnamedSnapshotBlobs(db: Db, before: number, limit: number): Promise<string[]> {
  const rows = await db
    .selectFrom('blobs')
    .select('key')
    .where('space', '=', 'snapshots')
    .where('created_at', '<', before)
    .where(({ not, exists, selectFrom }) => not(exists(selectFrom('workspace_snapshots').select('session_id').whereRef('workspace_snapshots.blob_key', '=', 'blobs.key'))))
    .limit(limit)
    .execute()
  return rows.map((r) => r.key)
}
