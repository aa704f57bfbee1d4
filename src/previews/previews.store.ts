import type { Db } from '../db/database.ts'
import { prepared } from '../db/prepared.ts'
import type { SessionPreview } from '../sessions/sessions.schema.ts'
import { toJson } from '../shared/json.ts'

export type PreviewRow = { subdomain: string; session_id: string; org_id: string; port: number; created_at: number }

/** Counts come back as text from some drivers (bigint on PostgreSQL). */
const toPreviewRow = (row: PreviewRow | undefined): PreviewRow | null => (row ? { ...row, port: Number(row.port), created_at: Number(row.created_at) } : null)

const bySubdomain = prepared((db, subdomain: string) => db.selectFrom('previews').selectAll().where('subdomain', '=', subdomain))

/** What the proxy needs for each request: whose site a subdomain is, and which port (kept only under the store's write mark: a DELETE stops it at once). */
export async function previewBySubdomain(db: Db, subdomain: string): Promise<PreviewRow | null> {
  return toPreviewRow((await bySubdomain(db, subdomain))[0])
}

export async function previewOfSession(db: Db, sessionId: string): Promise<PreviewRow | null> {
  return toPreviewRow(await db.selectFrom('previews').selectAll().where('session_id', '=', sessionId).executeTakeFirst())
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
