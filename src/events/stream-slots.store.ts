import { lockKey, type Store } from '../db/database.ts'

export type SlotCounts = { token: number; org: number }

/**
 * Takes a slot for a stream unless the token or the organization is at its ceiling; returns the
 * counts it found when refused, null when taken. One organization's slots are counted and taken
 * one request at a time (a lock on PostgreSQL, the single writer on SQLite), and slots that lapsed
 * (their process died) are removed first.
 */
export async function takeSlot(
  store: Store,
  slot: { id: string; tokenId: string; orgId: string; expiresAt: number },
  ceilings: { perToken: number; perOrg: number },
): Promise<SlotCounts | null> {
  return store.db.transaction().execute(async (trx) => {
    await lockKey(trx, store.dialect, `stream-slots:${slot.orgId}`)
    await trx.deleteFrom('stream_slots').where('org_id', '=', slot.orgId).where('expires_at', '<=', Date.now()).execute()
    const rows = await trx.selectFrom('stream_slots').select('token_id').where('org_id', '=', slot.orgId).execute()
    const counts = { token: rows.filter((r) => r.token_id === slot.tokenId).length, org: rows.length }
    if (counts.token >= ceilings.perToken || counts.org >= ceilings.perOrg) return counts
    await trx.insertInto('stream_slots').values({ id: slot.id, token_id: slot.tokenId, org_id: slot.orgId, expires_at: slot.expiresAt }).execute()
    return null
  })
}

export async function renewSlots(store: Store, ids: string[], expiresAt: number): Promise<void> {
  if (ids.length > 0) await store.db.updateTable('stream_slots').set({ expires_at: expiresAt }).where('id', 'in', ids).execute()
}

export async function freeSlots(store: Store, ids: string[]): Promise<void> {
  if (ids.length > 0) await store.db.deleteFrom('stream_slots').where('id', 'in', ids).execute()
}

/** Every slot: for a SQLite store at start, which one process owns (what a dead one left is nobody's). */
export async function clearSlots(store: Store): Promise<void> {
  await store.db.deleteFrom('stream_slots').execute()
}
