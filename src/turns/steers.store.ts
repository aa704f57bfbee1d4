import type { Db } from '../db/database.ts'
import { prepared } from '../db/prepared.ts'
import { newId } from '../shared/ids.ts'

/** Text steered into a running turn, waiting for the turn's next model step. */
export async function insertSteer(db: Db, s: { sessionId: string; turnId: string; text: string; now: number }): Promise<void> {
  await db.insertInto('steers').values({ id: newId('msg'), session_id: s.sessionId, turn_id: s.turnId, text: s.text, created_at: s.now, delivered: 0 }).execute()
}

export async function undeliveredSteers(db: Db, turnId: string): Promise<{ id: string; text: string }[]> {
  return undelivered(db, turnId)
}
const undelivered = prepared((db, turnId: string) => db.selectFrom('steers').select(['id', 'text']).where('turn_id', '=', turnId).where('delivered', '=', 0).orderBy('created_at').orderBy('id'))

export async function markSteersDelivered(db: Db, ids: string[]): Promise<void> {
  if (ids.length) await db.updateTable('steers').set({ delivered: 1 }).where('id', 'in', ids).execute()
}
