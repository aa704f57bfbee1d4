import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * Artifacts by the blob they name: a deleted session's artifact bytes are released only when no
 * other artifact names them (blobs are content-addressed, shared by equal files of any session),
 * asked once per blob a deletion lets go of.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema.createIndex('artifacts_blob').on('artifacts').columns(['blob_key']).execute()
}
