import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * Published previews: at most one per session, and a subdomain names at most one session across
 * every organization (it is a host name on the service's own origin). The proxy reads a row per
 * request, so deleting it stops the service answering for that name at once, in every process.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema
    .createTable('previews')
    .addColumn('subdomain', 'text', (c) => c.primaryKey())
    .addColumn('session_id', 'text', (c) => c.notNull().unique())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('port', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute()
}
