import { sql } from 'kysely'
import type { Db, DialectName } from '../db/database.ts'
import { storeNow } from './nodes.store.ts'
import { prepared } from '../db/prepared.ts'

/**
 * A session's lease: `sessions.owner_node` names the node that holds it, and it holds for as long
 * as that node's heartbeat is fresh by the store's clock. Claims are conditional updates, so two
 * nodes claiming at once cannot both win: the second finds the first one's fresh heartbeat.
 */

/** The session's owner (null: nobody), or undefined when there is no such live session. */
export async function ownerOf(db: Db, sessionId: string): Promise<string | null | undefined> {
  const row = await db.selectFrom('sessions').select('owner_node').where('id', '=', sessionId).where('deleted_at', 'is', null).executeTakeFirst()
  return row ? row.owner_node : undefined
}

/** Nobody, or a node that is stopped or whose heartbeat is older than the lease: the session is free to take. */
const lapsed = (dialect: DialectName, leaseMs: number) =>
  sql<boolean>`(sessions.owner_node IS NULL OR NOT EXISTS (SELECT 1 FROM nodes WHERE nodes.id = sessions.owner_node AND nodes.stopped_at IS NULL AND nodes.heartbeat_at > ${storeNow(dialect)} - ${leaseMs}))`

/** The epoch of a lease changing hands; kept when `me` already holds it (its drivers go on). */
const nextEpoch = (me: string) => sql<number>`CASE WHEN sessions.owner_node = ${me} THEN sessions.owner_epoch ELSE sessions.owner_epoch + 1 END`

/** Takes the session's lease for `me` unless a live node holds it. True when `me` holds it afterwards. */
export async function claimSession(db: Db, dialect: DialectName, sessionId: string, me: string, leaseMs: number): Promise<boolean> {
  const r = await db
    .updateTable('sessions')
    .set({ owner_node: me, owner_epoch: nextEpoch(me) })
    .where('id', '=', sessionId)
    .where('deleted_at', 'is', null)
    .where((eb) => eb.or([eb('owner_node', '=', me), lapsed(dialect, leaseMs)]))
    .executeTakeFirst()
  return Number(r.numUpdatedRows) > 0
}

/**
 * Takes up to `limit` live sessions of the given dead nodes for `me`, skipping rows another node
 * is taking this moment; the ids it took.
 */
export async function claimFromDead(db: Db, dialect: DialectName, me: string, dead: string[], limit: number): Promise<string[]> {
  if (dead.length === 0) return []
  let pick = db.selectFrom('sessions').select('id').where('owner_node', 'in', dead).where('deleted_at', 'is', null).limit(limit)
  if (dialect === 'postgres') pick = pick.forUpdate().skipLocked()
  const rows = await db.updateTable('sessions').set({ owner_node: me, owner_epoch: nextEpoch(me) }).where('id', 'in', pick).where('owner_node', 'in', dead).returning('id').execute()
  return rows.map((r) => r.id)
}

/** Deleted sessions keep no owner: their dead owner's row can then be forgotten. */
export async function dropDeletedOwnership(db: Db, dead: string[]): Promise<void> {
  if (dead.length === 0) return
  await db.updateTable('sessions').set({ owner_node: null }).where('owner_node', 'in', dead).where('deleted_at', 'is not', null).execute()
}

/** Lets go of the session's lease (nothing of it lives on this node any more). */
export async function releaseSession(db: Db, sessionId: string, me: string): Promise<void> {
  await db.updateTable('sessions').set({ owner_node: null }).where('id', '=', sessionId).where('owner_node', '=', me).execute()
}

/**
 * Live sessions with a working turn held by `owner`: null, nobody (a message accepted by a node
 * that died before claiming); a node's id, that node (each must have a driver, or be parked).
 */
export async function sessionsWithWork(db: Db, owner: string | null, limit?: number): Promise<string[]> {
  let q = db
    .selectFrom('turns')
    .innerJoin('sessions', 'sessions.id', 'turns.session_id')
    .select('turns.session_id')
    .distinct()
    .where('turns.status', '=', 'working')
    .where('sessions.owner_node', owner === null ? 'is' : '=', owner)
    .where('sessions.deleted_at', 'is', null)
  if (limit !== undefined) q = q.limit(limit)
  return (await q.execute()).map((r) => r.session_id)
}

/** The session's owner whether or not it is deleted (a deletion's clean-up goes to it); null: nobody. */
export async function ownerEvenDeleted(db: Db, sessionId: string): Promise<string | null> {
  const row = await db.selectFrom('sessions').select('owner_node').where('id', '=', sessionId).executeTakeFirst()
  return row?.owner_node ?? null
}

/** Live sessions nobody owns, for the first node after an upgrade from before leases. */
export async function ownerlessSessions(db: Db): Promise<string[]> {
  const rows = await db.selectFrom('sessions').select('id').where('owner_node', 'is', null).where('deleted_at', 'is', null).execute()
  return rows.map((r) => r.id)
}

/** The holding of a session's lease a driver acts under: its node and the epoch it found. */
export type Fence = { sessionId: string; nodeId: string; epoch: number }

/**
 * A write (or a sandbox act) of a node that no longer holds the session it acted for: it is
 * refused, and whoever made it stops. `owner`: the live node that holds it, when known (a
 * workspace asked for on a node that never held the session).
 */
export class LostOwnership extends Error {
  readonly owner: string | undefined
  constructor(sessionId: string, owner?: string) {
    super(owner ? `this node does not hold the lease of session ${sessionId}: node ${owner} runs its workspace` : `this node no longer holds the lease of session ${sessionId}: another node took it over`)
    this.owner = owner
  }
}

/** The fence for `me` acting on the session now, or null when `me` does not hold its lease. */
export async function fenceFor(db: Db, sessionId: string, me: string): Promise<Fence | null> {
  const row = await db.selectFrom('sessions').select(['owner_node', 'owner_epoch']).where('id', '=', sessionId).executeTakeFirst()
  return row && row.owner_node === me ? { sessionId, nodeId: me, epoch: Number(row.owner_epoch) } : null
}

/**
 * Throws LostOwnership unless the fence still holds: the session is held by its node in the same
 * epoch, and that node is not stopped (declared dead). Inside a transaction on PostgreSQL the
 * session row is locked for share until it ends: a claim by another node waits for the write,
 * so the taker reads what was written rather than having it land after the takeover.
 */
export async function checkFence(db: Db, dialect: DialectName, fence: Fence, lock: boolean): Promise<void> {
  // Every write of a turn asks: prepared, so Kysely builds and compiles it once.
  const held = lock && dialect === 'postgres' ? fenceHeldForShare : fenceHeld
  if ((await held(db, fence.sessionId, fence.nodeId, fence.epoch)).length === 0) throw new LostOwnership(fence.sessionId)
}

const fenceQuery = (db: Db, sessionId: string, nodeId: string, epoch: number) =>
  db
    .selectFrom('sessions')
    .select('id')
    .where('id', '=', sessionId)
    .where('owner_node', '=', nodeId)
    .where('owner_epoch', '=', epoch)
    .where(({ exists, selectFrom }) => exists(selectFrom('nodes').select('nodes.id').where('nodes.id', '=', nodeId).where('nodes.stopped_at', 'is', null)))
const fenceHeld = prepared(fenceQuery)
const fenceHeldForShare = prepared((db: Db, sessionId: string, nodeId: string, epoch: number) => fenceQuery(db, sessionId, nodeId, epoch).forShare())
