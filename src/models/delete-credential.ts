import { lockKey, type Store } from '../db/database.ts'
import { notFound } from '../errors.ts'
import { moveAgentsOffCredential } from '../agents/agents.store.ts'
import { credentialsLock } from './connect-model.ts'
import type { ModelCredentialDeleted } from './models.schema.ts'
import { deleteCredentialRow, getCredential, getDefaultCredential, moveSessionsOffCredential, oldestCredential, setDefaultCredential } from './models.store.ts'

/**
 * Removes a connection in one transaction. The organization keeps a default whenever it keeps a
 * connection (the oldest remaining takes over), and everything that ran on the removed one moves
 * to that default, or is left with none when nothing remains.
 */
export async function deleteCredential(store: Store, orgId: string, id: string): Promise<ModelCredentialDeleted> {
  return store.db.transaction().execute(async (trx) => {
    await lockKey(trx, store.dialect, credentialsLock(orgId))
    const gone = await getCredential(trx, orgId, id)
    if (!gone) throw notFound('model connection', id)
    await deleteCredentialRow(trx, orgId, id)
    let target = await getDefaultCredential(trx, orgId)
    if (!target) {
      target = await oldestCredential(trx, orgId)
      if (target) await setDefaultCredential(trx, orgId, target.id)
    }
    const movedTo = target?.id ?? null
    const sessionsMoved = await moveSessionsOffCredential(trx, orgId, id, movedTo, Date.now())
    if (movedTo) await moveAgentsOffCredential(trx, orgId, id, movedTo)
    return { object: 'model_credential.deleted' as const, id, deleted: true, sessions_moved: sessionsMoved, moved_to: movedTo }
  })
}
