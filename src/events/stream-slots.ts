import type { Store } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { newId } from '../shared/ids.ts'
import { clearSlots, freeSlots, renewSlots, takeSlot } from './stream-slots.store.ts'

/** Open event streams allowed at once (Limits: per token and per organization). */
const CEILINGS = { perToken: 5, perOrg: 20 }
/** What a refused client is told to wait: a slot of a client that just went away is freed by then. */
const RETRY_AFTER_SECONDS = 5
/** A slot whose process stopped renewing it (it died) lapses after this long. */
const SLOT_TTL_MS = 30_000

export type StreamSlots = {
  /** Takes a slot or throws 429 rate_limit_exceeded; the returned function gives it back (once). */
  acquire(tokenId: string, orgId: string): Promise<() => void>
  close(): Promise<void>
}

/**
 * The stream ceilings, kept in the store so that they hold across every process on it. A slot is
 * held from the moment a stream is accepted until its connection closes: at once for a client
 * that closes its socket or whose host resets it; a client that vanished without a word (a
 * dropped network) is noticed only when TCP gives up retransmitting the pings (minutes). Rows of
 * a process that died lapse after SLOT_TTL_MS; this process renews its own well before that.
 */
export async function streamSlots(store: Store): Promise<StreamSlots> {
  // One process owns a SQLite store: slots left by a process that died are nobody's.
  if (store.dialect === 'sqlite') await clearSlots(store)
  const held = new Set<string>()
  const renew = setInterval(() => void renewSlots(store, [...held], Date.now() + SLOT_TTL_MS).catch(() => {}), SLOT_TTL_MS / 3) // a missed renewal is made again a third of a TTL later, before the slots lapse
  renew.unref()

  return {
    async acquire(tokenId, orgId) {
      const id = newId('stm')
      const refused = await takeSlot(store, { id, tokenId, orgId, expiresAt: Date.now() + SLOT_TTL_MS }, CEILINGS)
      if (refused) {
        const [what, max] = refused.token >= CEILINGS.perToken ? ['This token', CEILINGS.perToken] : ['This organization', CEILINGS.perOrg]
        throw new ApiError('rate_limit_exceeded', `${what} already has ${max} open event streams, its ceiling; retry after ${RETRY_AFTER_SECONDS} s (a slot is freed when its stream's connection ends).`, {
          headers: { 'retry-after': String(RETRY_AFTER_SECONDS) },
        })
      }
      held.add(id)
      let released = false
      return () => {
        if (released) return
        released = true
        held.delete(id)
        void freeSlots(store, [id]).catch(() => {}) // a slot left unfreed lapses after SLOT_TTL_MS
      }
    },
    async close() {
      clearInterval(renew)
      const ids = [...held]
      held.clear()
      await freeSlots(store, ids).catch(() => {}) // slots left unfreed lapse after SLOT_TTL_MS
    },
  }
}
