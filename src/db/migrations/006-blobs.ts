import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * Blob bytes kept in the database, so that every node of a deployment on PostgreSQL reaches them
 * (artifacts, workspace snapshots). A blob is a row in `blobs` naming its upload; its bytes are
 * the upload's `blob_chunks` rows in order. Chunk rows rather than PostgreSQL large objects: a
 * large object is not removed with the row that names it (it needs lo_unlink bookkeeping, and a
 * crash between the two leaks it), and it sits outside the tables a logical backup copies;
 * chunk rows ride the same transactions as everything else, are rolled back with them, and are
 * dumped with the rest. SQLite keeps blob bytes in local files and never fills these tables, but
 * the same migrations serve both dialects.
 */
export async function up(db: Kysely<any>, dialect: DialectName): Promise<void> {
  const blob = dialect === 'postgres' ? 'bytea' : 'blob'
  await db.schema
    .createTable('blobs')
    // Separate key spaces (artifacts, snapshots): deleting one space's blob never takes bytes the
    // other still names, whatever their content.
    .addColumn('space', 'text', (c) => c.notNull())
    .addColumn('key', 'text', (c) => c.notNull())
    .addColumn('upload', 'text', (c) => c.notNull().unique())
    .addColumn('size', 'bigint', (c) => c.notNull())
    .addColumn('chunks', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('blobs_pk', ['space', 'key'])
    .execute()
  await db.schema
    .createTable('blob_chunks')
    .addColumn('upload', 'text', (c) => c.notNull())
    .addColumn('seq', 'integer', (c) => c.notNull())
    .addColumn('data', blob, (c) => c.notNull())
    .addPrimaryKeyConstraint('blob_chunks_pk', ['upload', 'seq'])
    .execute()
}
