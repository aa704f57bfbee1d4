import type { Store } from '../db/database.ts'
import type { EventBus } from './event-bus.ts'
import { lastSeq, readAllEventsAfter } from './events.store.ts'
import type { EventRowText } from './sse-frames.ts'

export type TailRow = EventRowText & { org_id: string }
export type EventTail = {
  /** Hands every event committed from now on (of the tail's types) to `deliver`, in seq order. */
  follow(deliver: (rows: TailRow[]) => void): () => void
  close(): void
}

const PAGE = 1000

/**
 * Reads the newest events once for every live stream of this process: a commit wakes the tail,
 * which reads what follows its head and hands the rows to each follower, instead of twenty
 * streams each running the same query. Followers keep their own cursor and drop what they have
 * already sent, so a head that lags only costs a read; it never runs ahead of a committed event,
 * because seq order is commit order (withEvents), so every seq below a notice's has committed.
 */
export function eventTail(store: Store, bus: EventBus, types: string[]): EventTail {
  const wanted = new Set(types)
  const followers = new Set<(rows: TailRow[]) => void>()
  let head: number | null = null
  let pumping = false
  let again = false
  let closed = false
  const init = lastSeq(store.db)
    .then((seq) => {
      head = Math.max(head ?? 0, seq)
    })
    .catch(() => {})

  const pump = async () => {
    if (pumping) {
      again = true
      return
    }
    pumping = true
    try {
      await init
      do {
        again = false
        for (;;) {
          if (closed || followers.size === 0 || head === null) break
          const rows = await readAllEventsAfter(store.db, types, head, PAGE)
          if (rows.length === 0) break
          head = rows.at(-1)!.seq
          for (const f of followers) f(rows)
          if (rows.length < PAGE) break
        }
      } while (again && !closed)
    } catch {
      // The store failed: each follower's own periodic re-read (at its ping) catches up.
    } finally {
      pumping = false
    }
  }

  const unsubscribe = bus.subscribe((n) => {
    if (!wanted.has(n.type)) return
    // With nobody following there is nothing to read; everything up to n.seq has committed.
    if (followers.size === 0 && !pumping) {
      if (head !== null) head = Math.max(head, n.seq)
      return
    }
    void pump()
  })

  return {
    follow(deliver) {
      followers.add(deliver)
      return () => void followers.delete(deliver)
    },
    close() {
      closed = true
      unsubscribe()
      followers.clear()
    },
  }
}
