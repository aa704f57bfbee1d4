import type { Db } from '../db/database.ts'
import type { DecodedFile } from './decode-files.ts'

/** Files kept for an owner (a session's seed files, a template's files) until the owner goes. */
export async function putSeedFiles(db: Db, ownerId: string, files: DecodedFile[]): Promise<void> {
  await db.deleteFrom('seed_files').where('owner_id', '=', ownerId).execute()
  if (files.length === 0) return
  await db
    .insertInto('seed_files')
    .values(files.map((f) => ({ owner_id: ownerId, path: f.path, mode: f.mode, size_bytes: f.content.length, content: f.content })))
    .execute()
}

export async function listSeedFiles(db: Db, ownerId: string): Promise<DecodedFile[]> {
  const rows = await db.selectFrom('seed_files').selectAll().where('owner_id', '=', ownerId).orderBy('path').execute()
  return rows.map((r) => ({ path: r.path, mode: r.mode, content: Buffer.from(r.content) }))
}

export async function deleteSeedFiles(db: Db, ownerId: string): Promise<void> {
  await db.deleteFrom('seed_files').where('owner_id', '=', ownerId).execute()
}
