import type { Store } from '../db/database.ts'
import { markedCache } from '../db/marked-cache.ts'
import { notFound } from '../errors.ts'
import type { ToolEntry } from '../tools/tools.schema.ts'
import type { Session } from './sessions.schema.ts'
import { getSessionRow, toSessions } from './sessions.store.ts'

/**
 * GET /sessions/{id}, the read clients poll: on SQLite a session shaped once is served again
 * until anything is written to the database (its status, workspace state, open calls and
 * deletion are all rows, so any change moves the mark). A 404 is never kept.
 */
export function sessionReader(store: Store, defaultTools: ToolEntry[]): (orgId: string, id: string, mark?: string) => Promise<Session> {
  const cache = markedCache<Session>(store)
  return async (orgId, id, mark) => {
    const session = await cache(`${orgId}\u0000${id}`, async () => {
      const row = await getSessionRow(store.db, orgId, id)
      return row ? (await toSessions(store.db, [row], defaultTools))[0]! : null
    }, mark)
    if (!session) throw notFound('session', id)
    return session
  }
}
