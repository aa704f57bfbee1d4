import type { Store } from '../db/database.ts'
import { RESYNC, type EventBus } from './event-bus.ts'
import { lastSeq, readEventsAfter } from './events.store.ts'
import type { EventRowText } from './sse-frames.ts'

export type TailRow = EventRowText & { org_id: string }
export type EventTail = {
  /**
   * Hands every event committed after the returned promise resolves (of the tail's types) to
   * `deliver`, in seq order, possibly with some already committed before; the follower reads the
   * store itself for what came before and drops what it has already sent. Resolves to the unfollow.
   */
  follow(deliver: (rows: TailRow[]) => void): Promise<() => void>
  /** True while a wake-up is being read: a live-only frame waits for what was committed before it. */
  reading(): boolean
  close(): void
}

const PAGE = 1000

/**
 * Reads the newest events once for every live stream of this process: a commit wakes the tail,
 * which reads what follows its head and hands the rows to each follower, instead of twenty
 * streams each running the same query. The head is taken from the store when the first follower
 * arrives, before that follower reads the store itself, so nothing committed falls between the
 * two; it moves only by what the tail has read (a notice is a reason to read, never a position:
 * one from another process or deployment can say nothing wrong). With no follower the tail
 * forgets its head and reads nothing.
 */
export function eventTail(store: Store, bus: EventBus, types: string[]): EventTail {
  const wanted = new Set(types)
  const followers = new Set<(rows: TailRow[]) => void>()
  let head: number | null = null
  let starting: Promise<void> | null = null
  let pumping = false
  let again = false
  let closed = false

  const pump = async () => {
    if (pumping) {
      again = true
      return
    }
    pumping = true
    try {
      await starting
      do {
        again = false
        for (;;) {
          if (closed || followers.size === 0 || head === null) break
          const rows = await readEventsAfter(store.db, null, types, head, PAGE)
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
      // Caught up: followers holding live-only frames for this read may send them now.
      for (const f of followers) f([])
    }
  }

  const unsubscribe = bus.subscribe((n) => {
    if ((wanted.has(n.type) || n.type === RESYNC) && followers.size > 0) void pump()
  })

  return {
    async follow(deliver) {
      followers.add(deliver)
      if (head === null) {
        starting ??= lastSeq(store.db)
          .then((seq) => {
            if (followers.size > 0) head = Math.max(head ?? 0, seq)
          })
          .finally(() => (starting = null))
        await starting
      }
      return () => {
        followers.delete(deliver)
        if (followers.size === 0) head = null
      }
    },
    reading: () => pumping,
    close() {
      closed = true
      unsubscribe()
      followers.clear()
    },
  }
}
