import type { Selectable } from 'kysely'
import { lockKeys, type Db, type Store } from '../db/database.ts'
import type { Tables } from '../db/tables.ts'
import { fromJson, toJson } from '../shared/json.ts'

export type ArtifactRow = Selectable<Tables['artifacts']>
export type Skipped = { path: string; reason: string }

export function toArtifact(r: ArtifactRow) {
  return {
    object: 'artifact' as const,
    id: r.id,
    session_id: r.session_id,
    turn_id: r.turn_id,
    path: r.path,
    size_bytes: Number(r.size_bytes),
    sha256: r.sha256,
    content_type: r.content_type,
    created_at: Number(r.created_at),
  }
}

/** Turns whose files still wait to be published, oldest first (all of them, or one session's). */
export async function turnsToPublish(db: Db, sessionId?: string) {
  let q = db.selectFrom('turns').select(['id', 'session_id', 'org_id']).where('artifacts', '=', 'pending').where('status', '!=', 'working')
  if (sessionId !== undefined) q = q.where('session_id', '=', sessionId)
  return q.orderBy('completed_at').execute()
}

/**
 * What the turn last did to each path, from its file.changed events in order: the paths whose last
 * change left a file (created or modified).
 */
export async function changedPaths(db: Db, turnId: string): Promise<string[]> {
  const rows = await db.selectFrom('events').select('payload').where('turn_id', '=', turnId).where('type', '=', 'file.changed').orderBy('seq').execute()
  const last = new Map<string, string>()
  for (const r of rows) {
    const p = fromJson<{ path?: string; kind?: string }>(r.payload, {})
    if (typeof p.path === 'string' && typeof p.kind === 'string') last.set(p.path, p.kind)
  }
  return [...last].filter(([, kind]) => kind !== 'deleted').map(([p]) => p).sort()
}

/**
 * Bytes of every artifact an organization keeps (through its sessions: artifacts are indexed by
 * session). A deleted session's are no longer kept for anyone (nothing serves them): they leave
 * the total with the commit that marks the session deleted, in the same transaction, and a
 * publication that was still writing rows for it adds nothing.
 */
export async function orgArtifactBytes(db: Db, orgId: string): Promise<number> {
  const r = await db
    .selectFrom('artifacts')
    .select((eb) => eb.fn.sum<string | number | null>('size_bytes').as('bytes'))
    .where('session_id', 'in', db.selectFrom('sessions').select('id').where('org_id', '=', orgId).where('deleted_at', 'is', null))
    .executeTakeFirst()
  return Number(r?.bytes ?? 0)
}

/** The paths a turn published already, with their sizes (a publication resumed, or another racing it). */
export async function publishedPaths(db: Db, turnId: string, paths?: string[]): Promise<Map<string, number>> {
  let q = db.selectFrom('artifacts').select(['path', 'size_bytes']).where('turn_id', '=', turnId)
  if (paths !== undefined) q = q.where('path', 'in', paths)
  return new Map((await q.execute()).map((r) => [r.path, Number(r.size_bytes)]))
}

/** True while the turn's publication has not ended. */
export async function publicationPending(db: Db, turnId: string): Promise<boolean> {
  return (await db.selectFrom('turns').select('id').where('id', '=', turnId).where('artifacts', '=', 'pending').executeTakeFirst()) !== undefined
}

/** Removes the session's artifacts; resolves the blob keys they named, each once (bytes to release when nothing else names them). */
export async function deleteSessionArtifacts(db: Db, sessionId: string): Promise<string[]> {
  const keys = await db.selectFrom('artifacts').select('blob_key').distinct().where('session_id', '=', sessionId).execute()
  if (keys.length > 0) await db.deleteFrom('artifacts').where('session_id', '=', sessionId).execute()
  return keys.map((k) => k.blob_key)
}

/** Whether any artifact (of any session) names the blob. */
export async function artifactBlobInUse(db: Db, blobKey: string): Promise<boolean> {
  return (await db.selectFrom('artifacts').select('id').where('blob_key', '=', blobKey).limit(1).executeTakeFirst()) !== undefined
}

export async function insertArtifacts(db: Db, rows: ArtifactRow[]): Promise<void> {
  // In batches: one statement's parameters are bounded (SQLite: 32,766), a turn's files are not.
  for (let i = 0; i < rows.length; i += 500) await db.insertInto('artifacts').values(rows.slice(i, i + 500)).execute()
}

/** Ends publication; false when another process ended it first (nothing of ours may then be kept). */
export async function finishPublication(db: Db, turnId: string, state: 'ready' | 'partial' | 'failed', skipped: Skipped[]): Promise<boolean> {
  const r = await db.updateTable('turns').set({ artifacts: state, artifacts_skipped: toJson(skipped) }).where('id', '=', turnId).where('artifacts', '=', 'pending').executeTakeFirst()
  return Number(r.numUpdatedRows) > 0
}

export async function getArtifactRow(db: Db, sessionId: string, id: string): Promise<ArtifactRow | null> {
  return (await db.selectFrom('artifacts').selectAll().where('session_id', '=', sessionId).where('id', '=', id).executeTakeFirst()) ?? null
}

/** The collection of a session's artifacts (or one turn's), for a list page. */
export function artifactRows(db: Db, sessionId: string, turnId?: string) {
  let q = db.selectFrom('artifacts').selectAll().where('session_id', '=', sessionId)
  if (turnId !== undefined) q = q.where('turn_id', '=', turnId)
  return q
}

/** Every artifact of the session (or of one turn), oldest first: what the archive holds. */
export function sessionArtifacts(db: Db, sessionId: string, turnId?: string) {
  return artifactRows(db, sessionId, turnId).orderBy('created_at').orderBy('id').execute()
}

/**
 * Naming an artifact blob and releasing one take the same per-key lock (an advisory lock on
 * PostgreSQL, SQLite's single writer otherwise), as snapshot blobs do: blobs are content-addressed,
 * so a publication may store bytes a deleted session's artifact named, and a release between its
 * put and its row would leave an artifact without bytes.
 */
export const lockArtifactBlobs = (trx: Db, dialect: Store['dialect'], keys: string[]) => lockKeys(trx, dialect, keys.map((key) => `blob:artifacts:${key}`))

/** Deletes each blob that no artifact names any more; resolves how many it deleted. */
export async function releaseArtifactBlobs(store: Store, blobs: { delete(key: string): Promise<void> }, keys: string[]): Promise<number> {
  let released = 0
  for (const key of keys) {
    const gone = await store.db.transaction().execute(async (trx) => {
      await lockArtifactBlobs(trx, store.dialect, [key])
      if (await artifactBlobInUse(trx, key)) return false
      await blobs.delete(key)
      return true
    })
    if (gone) released++
  }
  return released
}
