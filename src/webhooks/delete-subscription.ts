import type { Store } from '../db/database.ts'
import { notFound } from '../errors.ts'
import { deleteSubscription, getSubscriptionRow } from './webhooks.store.ts'

/** Removes a subscription of the organization with its deliveries, so nothing more is sent to it. */
export async function removeSubscription(store: Store, orgId: string, id: string): Promise<void> {
  await store.db.transaction().execute(async (trx) => {
    const row = await getSubscriptionRow(trx, orgId, id)
    if (!row) throw notFound('webhook subscription', id)
    await deleteSubscription(trx, row.id)
  })
}
