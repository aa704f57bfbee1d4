import { lockKey, type Store } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { newId } from '../shared/ids.ts'

/** Open event streams allowed at once (Limits: per token and per organization). */
export const STREAMS_PER_TOKEN = 5
export const STREAMS_PER_ORG = 20
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
 * held from the moment a stream is accepted until its connection closes, which the stream
 * notices at once for a client that closes its socket, and through TCP keep-alive and failed
 * pings for one that vanished. Rows of a process that died lapse after SLOT_TTL_MS; this process
 * renews its own well before that.
 */
export function streamSlots(store: Store, perToken = STREAMS_PER_TOKEN, perOrg = STREAMS_PER_ORG): StreamSlots {
  const held = new Set<string>()
  const renew = setInterval(() => {
    if (held.size === 0) return
    void store.db
      .updateTable('stream_slots')
      .set({ expires_at: Date.now() + SLOT_TTL_MS })
      .where('id', 'in', [...held])
      .execute()
      .catch(() => {})
  }, SLOT_TTL_MS / 3)
  renew.unref()
  const free = (id: string) => store.db.deleteFrom('stream_slots').where('id', '=', id).execute()

  const refuse = (what: string, max: number) =>
    new ApiError(
      'rate_limit_exceeded',
      `${what} already has ${max} open event streams, its ceiling; close one or retry after ${RETRY_AFTER_SECONDS} s (a slot is freed a few seconds after its client goes away).`,
      { headers: { 'retry-after': String(RETRY_AFTER_SECONDS) } },
    )

  return {
    async acquire(tokenId, orgId) {
      const id = newId('stm')
      await store.db.transaction().execute(async (trx) => {
        // One organization's slots are counted and taken one request at a time.
        await lockKey(trx, store.dialect, `stream-slots:${orgId}`)
        const now = Date.now()
        await trx.deleteFrom('stream_slots').where('org_id', '=', orgId).where('expires_at', '<=', now).execute()
        const rows = await trx.selectFrom('stream_slots').select('token_id').where('org_id', '=', orgId).execute()
        if (rows.filter((r) => r.token_id === tokenId).length >= perToken) throw refuse('This token', perToken)
        if (rows.length >= perOrg) throw refuse('This organization', perOrg)
        await trx.insertInto('stream_slots').values({ id, token_id: tokenId, org_id: orgId, expires_at: now + SLOT_TTL_MS }).execute()
      })
      held.add(id)
      let released = false
      return () => {
        if (released) return
        released = true
        held.delete(id)
        void free(id).catch(() => {})
      }
    },
    async close() {
      clearInterval(renew)
      const ids = [...held]
      held.clear()
      if (ids.length > 0) await store.db.deleteFrom('stream_slots').where('id', 'in', ids).execute().catch(() => {})
    },
  }
}
