import { setImmediate } from 'node:timers/promises'
import { lockSeq, type Db, type Store } from '../db/database.ts'
import { enqueueDeliveries } from '../webhooks/outbox.store.ts'
import type { EventBus } from './event-bus.ts'
import type { EventName } from './events.schema.ts'
import { appendEvent, appendEvents, type EventInput, type StoredEvent } from './events.store.ts'

/** Generic over the name, so the payload must be that event's (events.schema.ts). */
export type Recorder = (<N extends EventName>(event: EventInput<N>) => Promise<StoredEvent>) & {
  /**
   * Records these events in order, as many calls of the recorder would, a few statements for
   * thousands (a command's file changes), letting the event loop turn between chunks.
   */
  all<N extends EventName>(events: EventInput<N>[]): Promise<StoredEvent[]>
}

/** Events recorded by one statement of Recorder.all before the event loop may turn. */
const RECORD_CHUNK = 500

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
    const record: Recorder = Object.assign(
      async <N extends EventName>(input: EventInput<N>) => {
        const event = await appendEvent(trx, store.dialect, input)
        await enqueueDeliveries(trx, event)
        recorded.push(event)
        return event
      },
      {
        all: async <N extends EventName>(inputs: EventInput<N>[]) => {
          const events: StoredEvent[] = []
          for (let i = 0; i < inputs.length; i += RECORD_CHUNK) {
            // node:sqlite answers at once, so a transaction of awaited statements never lets the
            // loop turn by itself: other requests could not even be read meanwhile.
            if (i > 0) await setImmediate()
            for (const event of await appendEvents(trx, store.dialect, inputs.slice(i, i + RECORD_CHUNK))) {
              await enqueueDeliveries(trx, event)
              recorded.push(event)
              events.push(event)
            }
          }
          return events
        },
      },
    )
    return work(trx, record)
  })
  for (const e of recorded) bus.notify({ seq: e.seq, orgId: e.orgId, sessionId: e.sessionId, type: e.type })
  return result
}
