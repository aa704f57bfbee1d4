import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * The node whose request holds an Idempotency-Key in flight: a claim of a node that died (killed,
 * or paused past its lease) is released at once for a retry, rather than answer 409 for minutes.
 * Claims made before this column hold '' and keep the time-based release.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema.alterTable('idempotency_keys').addColumn('node_id', 'text', (c) => c.notNull().defaultTo('')).execute()
}
