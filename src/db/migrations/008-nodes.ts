import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * The service's nodes and who owns each session. Every `warren serve` on a store is a node with a
 * heartbeat row; a session belongs to the node named in `sessions.owner_node` for as long as that
 * node's heartbeat is fresh, so that renewing every lease a node holds is one write (its
 * heartbeat), and a lease lapses for all of a dead node's sessions at once. A node records what
 * it holds on its host (sandbox prefix, address pool, uid range), so that two nodes on one host
 * never share them.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema
    .createTable('nodes')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('host', 'text', (c) => c.notNull())
    .addColumn('pid', 'integer', (c) => c.notNull())
    .addColumn('url', 'text', (c) => c.notNull())
    .addColumn('data_dir', 'text', (c) => c.notNull())
    .addColumn('sandbox_prefix', 'text', (c) => c.notNull())
    .addColumn('sandbox_subnet', 'text', (c) => c.notNull())
    .addColumn('uid_base', 'integer', (c) => c.notNull())
    .addColumn('uid_count', 'integer', (c) => c.notNull())
    .addColumn('started_at', 'bigint', (c) => c.notNull())
    .addColumn('heartbeat_at', 'bigint', (c) => c.notNull())
    // Set when the node stopped, or when another declared it dead: it owns nothing from then on.
    .addColumn('stopped_at', 'bigint')
    .execute()
  await db.schema.alterTable('sessions').addColumn('owner_node', 'text').execute()
  await db.schema.createIndex('sessions_owner_node').on('sessions').column('owner_node').execute()
}
