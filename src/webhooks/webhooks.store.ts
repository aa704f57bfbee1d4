import { sql, type Selectable } from 'kysely'
import type { Db } from '../db/database.ts'
import type { Tables } from '../db/tables.ts'
import { newId } from '../shared/ids.ts'
import { fromJson, toJson } from '../shared/json.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import type { DeliveryStats, WebhookSubscription } from './webhooks.schema.ts'

export type SubscriptionRow = Selectable<Tables['webhook_subscriptions']>

/** The identity of an event set: two subscriptions listing the same types in any order are the same. */
export const eventsKey = (events: readonly string[]): string => [...events].sort().join(',')

const NO_DELIVERIES: DeliveryStats = { pending: 0, dead: 0, last_error: null, last_failed_at: null }

export function toSubscription(row: SubscriptionRow, delivery: DeliveryStats = NO_DELIVERIES, secret?: string): WebhookSubscription {
  return {
    object: 'webhook.subscription',
    id: row.id,
    url: row.url,
    events: fromJson(row.events, []),
    active: Number(row.active) === 1,
    created_at: Number(row.created_at),
    ...(secret !== undefined ? { secret } : {}),
    delivery,
  }
}

/** Id of the subscription of the organization with this exact url and event set, if any. */
export async function findIdenticalSubscription(db: Db, orgId: string, url: string, key: string): Promise<string | null> {
  const row = await db
    .selectFrom('webhook_subscriptions')
    .select('id')
    .where('org_id', '=', orgId)
    .where('url', '=', url)
    .where('events_key', '=', key)
    .executeTakeFirst()
  return row?.id ?? null
}

export type NewSubscription = { orgId: string; url: string; events: string[]; secretEnc: string }

export async function insertSubscription(db: Db, s: NewSubscription): Promise<SubscriptionRow> {
  const row: SubscriptionRow = {
    id: newId('whk'),
    org_id: s.orgId,
    url: s.url,
    events: toJson(s.events),
    events_key: eventsKey(s.events),
    secret_enc: s.secretEnc,
    active: 1,
    created_at: Date.now(),
  }
  await db.insertInto('webhook_subscriptions').values(row).execute()
  return row
}

export async function getSubscriptionRow(db: Db, orgId: string, id: string): Promise<SubscriptionRow | null> {
  return (await db.selectFrom('webhook_subscriptions').selectAll().where('id', '=', id).where('org_id', '=', orgId).executeTakeFirst()) ?? null
}

export function listSubscriptionRows(db: Db, orgId: string) {
  return db.selectFrom('webhook_subscriptions').selectAll().where('org_id', '=', orgId)
}

/**
 * Delivery counters of each subscription, computed from its deliveries: pending and dead counts,
 * and the error and time of the most recent failed attempt (whatever that delivery's status now).
 */
export async function deliveryStats(db: Db, subscriptionIds: string[]): Promise<Map<string, DeliveryStats>> {
  const stats = new Map<string, DeliveryStats>(subscriptionIds.map((id) => [id, { ...NO_DELIVERIES }]))
  if (subscriptionIds.length === 0) return stats
  const counts = await db
    .selectFrom('webhook_deliveries')
    .select([
      'subscription_id',
      sql<number>`sum(case when status = 'pending' then 1 else 0 end)`.as('pending'),
      sql<number>`sum(case when status = 'dead' then 1 else 0 end)`.as('dead'),
    ])
    .where('subscription_id', 'in', subscriptionIds)
    .groupBy('subscription_id')
    .execute()
  for (const c of counts) Object.assign(stats.get(c.subscription_id)!, { pending: Number(c.pending), dead: Number(c.dead) })

  const latest = db
    .selectFrom('webhook_deliveries')
    .select(['subscription_id', sql<number>`max(last_failed_at)`.as('at')])
    .where('subscription_id', 'in', subscriptionIds)
    .where('last_failed_at', 'is not', null)
    .groupBy('subscription_id')
    .as('m')
  const failures = await db
    .selectFrom('webhook_deliveries as d')
    .innerJoin(latest, (j) => j.onRef('m.subscription_id', '=', 'd.subscription_id').onRef('m.at', '=', 'd.last_failed_at'))
    .select(['d.subscription_id', 'd.last_error', 'd.last_failed_at'])
    // Two failures in the same millisecond: the later-created delivery's reason is shown.
    .orderBy('d.created_at', 'asc')
    .orderBy('d.id', 'asc')
    .execute()
  for (const f of failures) {
    Object.assign(stats.get(f.subscription_id)!, { last_error: f.last_error ?? '', last_failed_at: Number(f.last_failed_at) })
  }
  return stats
}

/** Removes the subscription and every delivery owed to it; run in a transaction. */
export async function deleteSubscription(db: Db, id: string): Promise<void> {
  await db.deleteFrom('webhook_deliveries').where('subscription_id', '=', id).execute()
  await db.deleteFrom('webhook_subscriptions').where('id', '=', id).execute()
}

/** The signing secret of a subscription, for the delivery worker; null when it no longer exists. */
export async function getSubscriptionSecret(db: Db, box: SecretBox, id: string): Promise<string | null> {
  const row = await db.selectFrom('webhook_subscriptions').select('secret_enc').where('id', '=', id).executeTakeFirst()
  return row ? box.open(row.secret_enc) : null
}
