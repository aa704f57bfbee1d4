import type { Store } from '../db/database.ts'
import { markedCache } from '../db/marked-cache.ts'
import { notFound } from '../errors.ts'
import type { ToolEntry } from '../tools/tools.schema.ts'
import type { Session } from './sessions.schema.ts'
import { getSessionRow, toSessions } from './sessions.store.ts'

export type SessionReader = {
  /** The organization's session, or a 404 naming it. */
  (orgId: string, id: string, mark?: string): Promise<Session>
  /** The session kept under this mark, answered at once; undefined when it must be read. */
  kept(orgId: string, id: string, mark: string | undefined): Session | undefined
}

/**
 * GET /sessions/{id}, the read clients poll: on SQLite a session shaped once is served again
 * (the same object) until anything is written to the database (its status, workspace state, open
 * calls and deletion are all rows, so any change moves the mark). A 404 is never kept.
 */
export function sessionReader(store: Store, defaultTools: ToolEntry[]): SessionReader {
  const cache = markedCache<Session>(store)
  const key = (orgId: string, id: string) => `${orgId}\u0000${id}`
  const read = async (orgId: string, id: string, mark?: string): Promise<Session> => {
    const session = await cache(key(orgId, id), async () => {
      const row = await getSessionRow(store.db, orgId, id)
      return row ? (await toSessions(store.db, [row], defaultTools))[0]! : null
    }, mark)
    if (!session) throw notFound('session', id)
    return session
  }
  return Object.assign(read, { kept: (orgId: string, id: string, mark: string | undefined) => cache.kept(key(orgId, id), mark) })
}
