import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * Each node's secret: a node passing a caller's request on to the node that owns the session
 * shows the owner's secret, so that the owner serves it as a request already admitted (never
 * passing it on again) and no caller can pose as a node.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema.alterTable('nodes').addColumn('secret', 'text').execute()
}
