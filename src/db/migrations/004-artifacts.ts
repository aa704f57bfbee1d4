import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/** Files a turn published: the record of each, its bytes kept in the blob store under `blob_key`. */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema
    .createTable('artifacts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('turn_id', 'text', (c) => c.notNull())
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('size_bytes', 'bigint', (c) => c.notNull())
    .addColumn('sha256', 'text', (c) => c.notNull())
    .addColumn('content_type', 'text', (c) => c.notNull())
    .addColumn('blob_key', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('artifacts_session').on('artifacts').columns(['session_id', 'created_at']).execute()
  await db.schema.createIndex('artifacts_turn').on('artifacts').columns(['turn_id']).execute()
  await db.schema.createIndex('turns_artifacts_pending').on('turns').columns(['artifacts']).execute()
}
