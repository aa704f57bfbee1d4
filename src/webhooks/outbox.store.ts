import type { Db } from '../db/database.ts'
import { newId } from '../shared/ids.ts'
import { WEBHOOK_EVENT_TYPES } from '../events/vocabulary.ts'
import type { StoredEvent } from '../events/events.store.ts'

const webhookTypes = new Set<string>(WEBHOOK_EVENT_TYPES)

/**
 * The outbox: one pending delivery per subscription that wants this event, written in the same
 * transaction as the event, so that a committed change is always delivered and a rolled-back one
 * never is.
 */
export async function enqueueDeliveries(db: Db, event: StoredEvent): Promise<number> {
  if (!webhookTypes.has(event.type)) return 0
  const subs = await db
    .selectFrom('webhook_subscriptions')
    .select(['id', 'events'])
    .where('org_id', '=', event.orgId)
    .where('active', '=', 1)
    .execute()
  const wanted = subs.filter((s) => (JSON.parse(s.events) as string[]).includes(event.type))
  if (wanted.length === 0) return 0
  await db
    .insertInto('webhook_deliveries')
    .values(
      wanted.map((s) => ({
        id: newId('dlv'),
        subscription_id: s.id,
        event_seq: event.seq,
        status: 'pending',
        attempts: 0,
        next_attempt_at: event.createdAt,
        last_error: null,
        last_failed_at: null,
        created_at: event.createdAt,
      })),
    )
    .execute()
  return wanted.length
}
