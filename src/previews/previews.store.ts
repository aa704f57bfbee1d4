import type { Db } from '../db/database.ts'
import type { SessionPreview } from '../sessions/sessions.schema.ts'
import { toJson } from '../shared/json.ts'

export type PreviewRow = { subdomain: string; session_id: string; org_id: string; port: number; created_at: number }

/** What the proxy needs for a request: whose site a subdomain is, and which port. */
export async function previewBySubdomain(db: Db, subdomain: string): Promise<PreviewRow | null> {
  const row = await db.selectFrom('previews').selectAll().where('subdomain', '=', subdomain).executeTakeFirst()
  return row ? { ...row, port: Number(row.port), created_at: Number(row.created_at) } : null
}

export async function previewOfSession(db: Db, sessionId: string): Promise<PreviewRow | null> {
  const row = await db.selectFrom('previews').selectAll().where('session_id', '=', sessionId).executeTakeFirst()
  return row ? { ...row, port: Number(row.port), created_at: Number(row.created_at) } : null
}

/** Replaces the session's preview (one per session) with this one. */
export async function putPreview(db: Db, row: PreviewRow): Promise<void> {
  await db.deleteFrom('previews').where('session_id', '=', row.session_id).execute()
  await db.insertInto('previews').values(row).execute()
}

/** Removes the session's preview; true when there was one. */
export async function deletePreviewRow(db: Db, sessionId: string): Promise<boolean> {
  const res = await db.deleteFrom('previews').where('session_id', '=', sessionId).executeTakeFirst()
  return Number(res.numDeletedRows) > 0
}

/** The session object's `preview` fields. */
export async function setSessionPreview(db: Db, sessionId: string, preview: SessionPreview, now: number): Promise<void> {
  await db.updateTable('sessions').set({ preview: toJson(preview), updated_at: now }).where('id', '=', sessionId).execute()
}
