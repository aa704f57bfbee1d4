import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * Preview names withdrawn lately: each stays its organization's until `held_until`, so that a
 * name another organization's links and visitors know is not taken over by someone else at once.
 * A row past its time means nothing and is cleared when a name is next withdrawn.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema
    .createTable('preview_name_holds')
    .addColumn('subdomain', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('held_until', 'bigint', (c) => c.notNull())
    .execute()
}
