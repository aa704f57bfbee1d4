import fs from 'node:fs'
import pg from 'pg'
import type { DialectName } from '../src/db/database.ts'
import { PG_URL } from './harness.ts'

/** Removes a store two instances shared across a restart (the harness leaves a given one in place). */
export async function removeSharedStore(dialect: DialectName, dataDir: string, pgSchema: string): Promise<void> {
  fs.rmSync(dataDir, { recursive: true, force: true })
  if (dialect !== 'postgres') return
  const c = new pg.Client({ connectionString: PG_URL })
  await c.connect()
  await c.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`)
  await c.end()
}
