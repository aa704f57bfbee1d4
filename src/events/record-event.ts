import { lockSeq, type Db, type Store } from '../db/database.ts'
import { enqueueDeliveries } from '../webhooks/outbox.store.ts'
import type { EventBus } from './event-bus.ts'
import type { EventName } from './events.schema.ts'
import { appendEvent, type EventInput, type StoredEvent } from './events.store.ts'

/** Generic over the name, so the payload must be that event's (events.schema.ts). */
export type Recorder = <N extends EventName>(event: EventInput<N>) => Promise<StoredEvent>

/**
 * Runs `work` in one transaction in which `record` appends events and their webhook outbox rows.
 * Listeners are woken only after the commit, so nobody reads an event that may still roll back.
 * On PostgreSQL these transactions run one at a time (the seq lock), which is what keeps seq order
 * equal to commit order.
 */
export async function withEvents<T>(
  store: Store,
  bus: EventBus,
  work: (trx: Db, record: Recorder) => Promise<T>,
): Promise<T> {
  const recorded: StoredEvent[] = []
  const result = await store.db.transaction().execute(async (trx) => {
    // The seq lock comes first, before any row lock: a transaction that took row locks and then
    // waited for it could deadlock with one holding it and waiting for those rows (PostgreSQL).
    await lockSeq(trx, store.dialect)
    const record: Recorder = async (input) => {
      const event = await appendEvent(trx, store.dialect, input)
      await enqueueDeliveries(trx, event)
      recorded.push(event)
      return event
    }
    return work(trx, record)
  })
  for (const e of recorded) bus.notify({ seq: e.seq, orgId: e.orgId, sessionId: e.sessionId, type: e.type })
  return result
}
