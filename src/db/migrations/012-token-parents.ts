import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * The token that minted each token (null: minted by the CLI, or before this was kept), so that
 * revoking a token revokes every token minted under it, whatever lifetime they were given.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema.alterTable('tokens').addColumn('parent_id', 'text').execute()
  await db.schema.createIndex('tokens_parent').on('tokens').column('parent_id').execute()
}
