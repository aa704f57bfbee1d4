// A node paused or stalled in the middle of a transaction (issue 25, item 8's chaos: SIGSTOP at any
// instant) must not hold its locks over the whole service until it wakes: the event sequence's
// lock, taken by every write that records an event, would stall every node's turns. PostgreSQL
// ends such a session past the node's lease (idle_in_transaction_session_timeout).
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { lockSeq, openStore, type Store } from '../src/db/database.ts'
import { onPostgres, PG_URL } from './harness.ts'

onPostgres('a transaction stalled past the lease', () => {
  const schema = `stall_${randomBytes(4).toString('hex')}`
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-stall-'))
  let stalled: Store
  let other: Store
  before(async () => {
    stalled = await openStore({ dataDir: dir, databaseUrl: PG_URL, pgSchema: schema, idleInTransactionMs: 300 })
    other = await openStore({ dataDir: dir, databaseUrl: PG_URL, pgSchema: schema, idleInTransactionMs: 300 })
  })
  after(async () => {
    await stalled?.close()
    await other?.close()
    const admin = new pg.Client({ connectionString: PG_URL })
    await admin.connect()
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await admin.end()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it('loses its locks and its transaction: another node records its events meanwhile, and the stalled commit fails', async () => {
    let resume!: () => void
    const stall = new Promise<void>((r) => (resume = r))
    let held!: () => void
    const locked = new Promise<void>((r) => (held = r))
    const stalledTrx = stalled.db.transaction().execute(async (trx) => {
      await lockSeq(trx, 'postgres')
      held()
      // The node stops here (a pause, a long stall of its event loop) holding the sequence's lock.
      await stall
      await lockSeq(trx, 'postgres')
    })
    await locked
    // Another node's event write waits for the lock only until PostgreSQL ends the stalled session;
    // without the timeout it would wait for `resume`, which only comes after it: the test hangs.
    await other.db.transaction().execute((trx) => lockSeq(trx, 'postgres'))
    resume()
    await assert.rejects(stalledTrx, 'the stalled transaction was ended: nothing of it commits')
  })
})
