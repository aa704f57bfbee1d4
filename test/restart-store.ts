import pg from 'pg'
import type { DialectName } from '../src/db/database.ts'
import { removeDataDir } from './left-on-host.ts'
import { PG_URL } from './harness.ts'

/** Removes a store two instances shared across a restart (the harness leaves a given one in place). */
export async function removeSharedStore(dialect: DialectName, dataDir: string, pgSchema: string): Promise<void> {
  removeDataDir(dataDir)
  if (dialect !== 'postgres') return
  const c = new pg.Client({ connectionString: PG_URL })
  await c.connect()
  await c.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`)
  await c.end()
}
