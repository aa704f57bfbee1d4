import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/** The image an environment template names (an OCI reference as written); null: none, the host's system. */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema.alterTable('environment_templates').addColumn('image', 'text').execute()
}
