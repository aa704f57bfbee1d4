import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * Open event streams, one row each, so that the ceilings per token and per organization hold
 * across every service process on one store. A row is renewed while its stream is open and
 * lapses at `expires_at` when its process died without removing it.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema
    .createTable('stream_slots')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('token_id', 'text', (c) => c.notNull())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('stream_slots_org').on('stream_slots').columns(['org_id', 'expires_at']).execute()
}
