import { sql, type RawBuilder, type Selectable } from 'kysely'
import type { Db, DialectName } from '../db/database.ts'
import type { Tables } from '../db/tables.ts'

export type NodeRow = Selectable<Tables['nodes']>
export type NewNode = Omit<NodeRow, 'started_at' | 'heartbeat_at' | 'stopped_at'>

/**
 * The store's clock, in Unix ms. Heartbeats are written and judged by it, so that nodes whose own
 * clocks disagree still agree on whose lease has lapsed.
 */
export function storeNow(dialect: DialectName): RawBuilder<number> {
  return dialect === 'postgres' ? sql<number>`(extract(epoch from clock_timestamp()) * 1000)::bigint` : sql<number>`CAST(unixepoch('subsec') * 1000 AS INTEGER)`
}

export async function insertNode(db: Db, dialect: DialectName, node: NewNode): Promise<void> {
  await db
    .insertInto('nodes')
    .values({ ...node, started_at: storeNow(dialect), heartbeat_at: storeNow(dialect), stopped_at: null })
    .execute()
}

/** Renews every lease the node holds. False: the node was declared dead (or stopped); it owns nothing. */
export async function beat(db: Db, dialect: DialectName, id: string): Promise<boolean> {
  const r = await db.updateTable('nodes').set({ heartbeat_at: storeNow(dialect) }).where('id', '=', id).where('stopped_at', 'is', null).executeTakeFirst()
  return Number(r.numUpdatedRows) > 0
}

/**
 * True while the node is live by the store's clock: not stopped, its heartbeat within the lease.
 * On PostgreSQL the row is locked for share until the transaction ends, so that no declaration of
 * its death commits in between (a session it creates is never born owned by a dead node).
 */
export async function nodeIsLive(db: Db, dialect: DialectName, id: string, leaseMs: number): Promise<boolean> {
  let q = db.selectFrom('nodes').select('id').where('id', '=', id).where('stopped_at', 'is', null).where(sql<boolean>`heartbeat_at > ${storeNow(dialect)} - ${leaseMs}`)
  if (dialect === 'postgres') q = q.forShare()
  return (await q.executeTakeFirst()) !== undefined
}

/** Every node row with the store's clock, to judge liveness by one clock. */
export async function readNodes(db: Db, dialect: DialectName): Promise<{ now: number; nodes: NodeRow[] }> {
  const [nodes, clock] = await Promise.all([
    db.selectFrom('nodes').selectAll().orderBy('started_at').execute(),
    sql<{ now: number }>`SELECT ${storeNow(dialect)} AS now`.execute(db),
  ])
  return { now: Number(clock.rows[0]!.now), nodes }
}

/**
 * Declares a node dead: only while it is still not stopped and its heartbeat is older than
 * `leaseMs` by the store's clock (a node that beat meanwhile stays alive), or at once with
 * `leaseMs` 0 (a predecessor whose process is gone). True when this call declared it.
 */
export async function declareDead(db: Db, dialect: DialectName, id: string, leaseMs: number): Promise<boolean> {
  const r = await db
    .updateTable('nodes')
    .set({ stopped_at: storeNow(dialect) })
    .where('id', '=', id)
    .where('stopped_at', 'is', null)
    .where(sql<boolean>`heartbeat_at <= ${storeNow(dialect)} - ${leaseMs}`)
    .executeTakeFirst()
  return Number(r.numUpdatedRows) > 0
}

/** Where peers reach the node, once it listens. */
export async function setNodeUrl(db: Db, id: string, url: string): Promise<void> {
  await db.updateTable('nodes').set({ url }).where('id', '=', id).execute()
}

export async function markStopped(db: Db, dialect: DialectName, id: string): Promise<void> {
  await db.updateTable('nodes').set({ stopped_at: storeNow(dialect) }).where('id', '=', id).where('stopped_at', 'is', null).execute()
}

/** Forgets stopped nodes that no longer own a session. */
export async function pruneNodes(db: Db): Promise<void> {
  await db
    .deleteFrom('nodes')
    .where('stopped_at', 'is not', null)
    .where(({ not, exists, selectFrom }) => not(exists(selectFrom('sessions').select('id').whereRef('sessions.owner_node', '=', 'nodes.id'))))
    .execute()
}
