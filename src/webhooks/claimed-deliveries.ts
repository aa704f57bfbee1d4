import type { Db } from '../db/database.ts'
import type { StoredEvent } from '../events/events.store.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import { deliveryEvents, deliveryTargets, turnsPublishing, type ClaimedDelivery, type DeliveryTarget } from './deliveries.store.ts'

/** A claimed delivery with what its attempt needs, waiting for a free lane of its subscription. */
export type ReadyDelivery = { row: ClaimedDelivery; event: StoredEvent; target: DeliveryTarget; lease: number }

/** What became of each claimed delivery once read: ready to attempt, or to be given back (event gone, or held). */
export type ClaimedRead = { ready: ReadyDelivery[]; notNow: { row: ClaimedDelivery; event: StoredEvent | undefined }[] }

/**
 * Reads what claimed deliveries need, in three reads for the whole batch: their events, their
 * subscriptions' targets (remembered), and which of their turns still publish artifacts (a
 * `turn.completed` waits for them, at most `turnCompletedWaitMs` after the event). A delivery
 * without a target went with its subscription (deleted in the same transaction): it is dropped.
 */
export function claimedReader(db: Db, box: SecretBox, turnCompletedWaitMs: number) {
  const targets = targetCache(db, box)
  return async (claimed: ClaimedDelivery[], lease: number): Promise<ClaimedRead> => {
    const events = await deliveryEvents(db, claimed.map((c) => c.eventSeq))
    const where = await targets(claimed.map((c) => c.subscriptionId))
    const now = Date.now()
    const waiting = [...events.values()].filter((e) => e.type === 'turn.completed' && now < e.createdAt + turnCompletedWaitMs)
    const publishing = await turnsPublishing(db, waiting.map(turnOf).filter((t): t is string => t !== null))
    const read: ClaimedRead = { ready: [], notNow: [] }
    for (const row of claimed) {
      const event = events.get(row.eventSeq)
      const target = where.get(row.subscriptionId)
      if (!target) continue
      if (event && !isHeld(event, publishing)) read.ready.push({ row, event, target, lease })
      else read.notNow.push({ row, event })
    }
    return read
  }
}

/**
 * Where each subscription's deliveries go, remembered: a subscription never changes, and a deleted
 * one takes its deliveries with it, so nothing is claimed for it afterwards.
 */
function targetCache(db: Db, box: SecretBox) {
  const known = new Map<string, DeliveryTarget>()
  return async (subscriptionIds: string[]): Promise<Map<string, DeliveryTarget>> => {
    const missing = [...new Set(subscriptionIds)].filter((id) => !known.has(id))
    if (missing.length > 0) {
      if (known.size > 10_000) known.clear()
      for (const [id, t] of await deliveryTargets(db, box, missing)) known.set(id, t)
    }
    return new Map(subscriptionIds.flatMap((id) => (known.has(id) ? [[id, known.get(id)!] as const] : [])))
  }
}

function turnOf(e: StoredEvent): string | null {
  return (e.payload.turn_id as string | undefined) ?? e.turnId
}

/** `turn.completed` waits until its turn's artifacts are published (`publishing` holds only turns still within the wait). */
function isHeld(e: StoredEvent, publishing: Set<string>): boolean {
  const turn = turnOf(e)
  return e.type === 'turn.completed' && turn !== null && publishing.has(turn)
}
