import { sql } from 'kysely'
import type { Db, DialectName } from '../db/database.ts'
import { toStoredEvent, type StoredEvent } from '../events/events.store.ts'
import type { SecretBox } from '../shared/secret-box.ts'

export type DeliveryCandidate = { id: string; subscriptionId: string; attempts: number; nextAttemptAt: number }

/**
 * The earliest pending deliveries, due or not, of every subscription but `skip` (those already at
 * their share of attempts): the worker picks the due ones and learns from the rest when to look
 * again. Skipping in the query keeps one subscription's backlog from filling the window.
 */
export async function pendingDeliveries(db: Db, skip: string[], limit: number): Promise<DeliveryCandidate[]> {
  let q = db.selectFrom('webhook_deliveries').select(['id', 'subscription_id', 'attempts', 'next_attempt_at']).where('status', '=', 'pending')
  if (skip.length > 0) q = q.where('subscription_id', 'not in', skip)
  const rows = await q.orderBy('next_attempt_at').limit(limit).execute()
  return rows.map((r) => ({ id: r.id, subscriptionId: r.subscription_id, attempts: Number(r.attempts), nextAttemptAt: Number(r.next_attempt_at) }))
}

/**
 * A delivery's status as a value no index serves, for statements that name their deliveries by id:
 * they are found through the primary key. Without statistics SQLite guesses that `status =
 * 'pending'` selects a few rows, and for an IN list of some 30 ids it scanned every pending
 * delivery through the due-time index instead: a backlog made every batch cost the whole backlog.
 */
const PENDING_BY_VALUE = sql<string>`status || ''`

export type ClaimedDelivery = { id: string; subscriptionId: string; eventSeq: number; attempts: number }

/** Which deliveries to claim: these (picked from pendingDeliveries), or up to `limit` due ones of one subscription. */
export type ClaimTarget = { ids: string[] } | { subscriptionId: string; limit: number }

/**
 * Takes deliveries that are still due by moving them to `leaseUntil`, in one statement: a delivery
 * another process took meanwhile is no longer due and is left out, and one whose taker died is due
 * again once its lease runs out. PostgreSQL skips rows another claim is locking instead of waiting
 * on them; SQLite has a single writer.
 */
export async function claimDeliveries(db: Db, dialect: DialectName, which: ClaimTarget, now: number, leaseUntil: number): Promise<ClaimedDelivery[]> {
  let due = db.selectFrom('webhook_deliveries').select('id')
  if ('ids' in which) {
    if (which.ids.length === 0) return []
    due = due.where('id', 'in', which.ids).where(PENDING_BY_VALUE, '=', 'pending').where('next_attempt_at', '<=', now)
  } else {
    // Through the subscription's index, unordered (deliveries may arrive out of order anyway): the
    // `+ 0` keeps the planner off the due-time index, which would walk every other subscription's
    // due backlog to find this one's.
    due = due.where('status', '=', 'pending').where('subscription_id', '=', which.subscriptionId).where(sql<number>`next_attempt_at + 0`, '<=', now).limit(which.limit)
  }
  const rows = await db
    .updateTable('webhook_deliveries')
    .set({ next_attempt_at: leaseUntil })
    .where('id', 'in', dialect === 'postgres' ? due.forUpdate().skipLocked() : due)
    .returning(['id', 'subscription_id', 'event_seq', 'attempts'])
    .execute()
  return rows.map((r) => ({ id: r.id, subscriptionId: r.subscription_id, eventSeq: Number(r.event_seq), attempts: Number(r.attempts) }))
}

export async function deliveryEvents(db: Db, seqs: number[]): Promise<Map<number, StoredEvent>> {
  if (seqs.length === 0) return new Map()
  const rows = await db.selectFrom('events').selectAll().where('seq', 'in', [...new Set(seqs)]).execute()
  return new Map(rows.map((r) => [Number(r.seq), toStoredEvent(r)]))
}

export type DeliveryTarget = { url: string; secret: string }

/** Where and with which secret each subscription's deliveries go; a deleted subscription is absent. */
export async function deliveryTargets(db: Db, box: SecretBox, subscriptionIds: string[]): Promise<Map<string, DeliveryTarget>> {
  if (subscriptionIds.length === 0) return new Map()
  const rows = await db.selectFrom('webhook_subscriptions').select(['id', 'url', 'secret_enc']).where('id', 'in', [...new Set(subscriptionIds)]).execute()
  return new Map(rows.map((r) => [r.id, { url: r.url, secret: box.open(r.secret_enc) }]))
}

/** Which of these turns are still publishing their artifacts. */
export async function turnsPublishing(db: Db, turnIds: string[]): Promise<Set<string>> {
  if (turnIds.length === 0) return new Set()
  const rows = await db.selectFrom('turns').select('id').where('id', 'in', [...new Set(turnIds)]).where('artifacts', '=', 'pending').execute()
  return new Set(rows.map((r) => r.id))
}

/** What an attempt (or a claim given back) leaves on its delivery; `lease` is the claim it was made under. */
export type DeliveryOutcome =
  | { id: string; kind: 'delivered'; attempts: number }
  | { id: string; kind: 'failed'; lease: number; attempts: number; error: string; at: number; nextAttemptAt: number | null }
  | { id: string; kind: 'rescheduled'; lease: number; at: number }

/**
 * Writes many attempts' outcomes in one transaction (one commit instead of one per attempt), each
 * with the same conditions as on its own: a 2xx answer is final whoever holds the lease now (those
 * sharing an attempt count go in one statement), a failure or a give-back counts only under its claim.
 */
export async function recordOutcomes(db: Db, outcomes: DeliveryOutcome[]): Promise<void> {
  if (outcomes.length === 0) return
  await db.transaction().execute(async (trx) => {
    const delivered = new Map<number, string[]>()
    for (const o of outcomes) {
      if (o.kind === 'delivered') delivered.set(o.attempts, [...(delivered.get(o.attempts) ?? []), o.id])
      else if (o.kind === 'failed') await markFailed(trx, o.id, o.lease, o)
      else await rescheduleDelivery(trx, o.id, o.lease, o.at)
    }
    for (const [attempts, ids] of delivered) {
      await trx.updateTable('webhook_deliveries').set({ status: 'delivered', attempts, next_attempt_at: null }).where('id', 'in', ids).where(PENDING_BY_VALUE, '=', 'pending').execute()
    }
  })
}

/**
 * A failed attempt, recorded only while this worker still holds the lease: `nextAttemptAt` null
 * makes the delivery dead, keeping the reason.
 */
export async function markFailed(db: Db, id: string, lease: number, f: { attempts: number; error: string; at: number; nextAttemptAt: number | null }): Promise<void> {
  await db
    .updateTable('webhook_deliveries')
    .set({ attempts: f.attempts, last_error: f.error, last_failed_at: f.at, status: f.nextAttemptAt === null ? 'dead' : 'pending', next_attempt_at: f.nextAttemptAt })
    .where('id', '=', id)
    .where('status', '=', 'pending')
    .where('next_attempt_at', '=', lease)
    .execute()
}

/** Gives a claimed delivery back without counting an attempt: due again at `at`. */
export async function rescheduleDelivery(db: Db, id: string, lease: number, at: number): Promise<void> {
  await db.updateTable('webhook_deliveries').set({ next_attempt_at: at }).where('id', '=', id).where('status', '=', 'pending').where('next_attempt_at', '=', lease).execute()
}

/** How many deliveries are in `status` (the operator's gauges of the backlog and of the given-up). */
export async function countDeliveries(db: Db, status: 'pending' | 'dead'): Promise<number> {
  const row = await db.selectFrom('webhook_deliveries').select((eb) => eb.fn.countAll<number | string>().as('n')).where('status', '=', status).executeTakeFirstOrThrow()
  return Number(row.n)
}

/**
 * When the earliest pending delivery fell due (Unix ms), null when none is pending: through the
 * due-time index, one row read. A claimed delivery's due time is its lease's end, so one being sent
 * is not late unless its sender died.
 */
export async function earliestPendingDue(db: Db): Promise<number | null> {
  const row = await db.selectFrom('webhook_deliveries').select((eb) => eb.fn.min('next_attempt_at').as('due')).where('status', '=', 'pending').executeTakeFirst()
  return row?.due === null || row?.due === undefined ? null : Number(row.due)
}
