import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * Nodes' secrets are kept sealed with the deployment's key from now on. One written in plain text
 * by an earlier version (a sealed value has dots, a plain one none) is dropped: its node, should it
 * still run, is then not passed requests until it starts again, rather than the store handing
 * whoever reads it a secret to pose as that node with.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.updateTable('nodes').set({ secret: null }).where('secret', 'not like', '%.%').execute()
}
