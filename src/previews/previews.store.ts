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

/** Replaces the session's preview (one per session) with this one; a name it leaves is held until `holdUntil`. */
export async function putPreview(db: Db, row: PreviewRow, holdUntil: number): Promise<void> {
  const previous = await previewOfSession(db, row.session_id)
  if (previous && previous.subdomain !== row.subdomain) await holdPreviewName(db, previous, holdUntil, row.created_at)
  await db.deleteFrom('previews').where('session_id', '=', row.session_id).execute()
  await db.insertInto('previews').values(row).execute()
}

/** Removes the session's preview, its name held for its organization until `holdUntil`; false when it had none. */
export async function withdrawPreview(db: Db, sessionId: string, holdUntil: number, now: number): Promise<boolean> {
  const previous = await previewOfSession(db, sessionId)
  if (!previous) return false
  await db.deleteFrom('previews').where('session_id', '=', sessionId).execute()
  await holdPreviewName(db, previous, holdUntil, now)
  return true
}

/** Keeps a withdrawn name its organization's until `until` (holds already over are cleared on the way). */
async function holdPreviewName(db: Db, row: Pick<PreviewRow, 'subdomain' | 'org_id'>, until: number, now: number): Promise<void> {
  await db.deleteFrom('preview_name_holds').where('held_until', '<=', now).execute()
  if (until <= now) return
  await db
    .insertInto('preview_name_holds')
    .values({ subdomain: row.subdomain, org_id: row.org_id, held_until: until })
    .onConflict((oc) => oc.column('subdomain').doUpdateSet({ org_id: row.org_id, held_until: until }))
    .execute()
}

/** The organization a withdrawn name is still held for, and until when; null when it is free. */
export async function previewNameHold(db: Db, subdomain: string, now: number): Promise<{ org_id: string; held_until: number } | null> {
  const hold = await db.selectFrom('preview_name_holds').select(['org_id', 'held_until']).where('subdomain', '=', subdomain).where('held_until', '>', now).executeTakeFirst()
  return hold ? { org_id: hold.org_id, held_until: Number(hold.held_until) } : null
}

/** The session object's `preview` fields. */
export async function setSessionPreview(db: Db, sessionId: string, preview: SessionPreview, now: number): Promise<void> {
  await db.updateTable('sessions').set({ preview: toJson(preview), updated_at: now }).where('id', '=', sessionId).execute()
}
