import type { Db } from '../db/database.ts'
import { notFound } from '../errors.ts'
import { getSessionRow, type SessionRow } from './sessions.store.ts'

/** The organization's live session by id, or a 404 naming it: where every session-scoped call starts. */
export async function requireSession(db: Db, orgId: string, id: string): Promise<SessionRow> {
  const row = await getSessionRow(db, orgId, id)
  if (!row) throw notFound('session', id)
  return row
}
