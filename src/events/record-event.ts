import type { Db, Store } from '../db/database.ts'
import { enqueueDeliveries } from '../webhooks/outbox.store.ts'
import type { EventBus } from './event-bus.ts'
import { appendEvent, type EventInput, type StoredEvent } from './events.store.ts'

export type Recorder = (event: EventInput) => Promise<StoredEvent>

/**
 * Runs `work` in one transaction in which `record` appends events and their webhook outbox rows.
 * Listeners are woken only after the commit, so nobody reads an event that may still roll back.
 */
export async function withEvents<T>(
  store: Store,
  bus: EventBus,
  work: (trx: Db, record: Recorder) => Promise<T>,
): Promise<T> {
  const recorded: StoredEvent[] = []
  const result = await store.db.transaction().execute(async (trx) => {
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
