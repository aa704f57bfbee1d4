import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * The latest snapshot of each session's workspace (a tar in the blob store under `blob_key`), from
 * which another node brings the workspace back when the one that held it is gone.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema
    .createTable('workspace_snapshots')
    .addColumn('session_id', 'text', (c) => c.primaryKey())
    .addColumn('blob_key', 'text', (c) => c.notNull())
    .addColumn('taken_at', 'bigint', (c) => c.notNull())
    .addColumn('bytes', 'bigint', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('workspace_snapshots_blob').on('workspace_snapshots').columns(['blob_key']).execute()
}
