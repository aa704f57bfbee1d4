// What the store's delivery statements ask of SQLite's planner: statements that name their
// deliveries by id must find them through the primary key, whatever the backlog.
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Kysely, type CompiledQuery } from 'kysely'
import { openStore } from '../src/db/database.ts'
import { openSqlite } from '../src/db/sqlite-dialect.ts'
import type { Tables } from '../src/db/tables.ts'
import { claimDeliveries, recordOutcomes } from '../src/webhooks/deliveries.store.ts'

describe('a batch of deliveries is found by id, whatever the backlog [sqlite]', () => {
  it('claiming picked deliveries and recording a batch of outcomes read their rows through the primary key, not the backlog of pending ones', async () => {
    // Without statistics SQLite guesses that `status = 'pending'` selects a few rows, and for an
    // IN list of some 30 ids it preferred scanning every pending delivery through the due-time
    // index: a receiver that was down for a while made every batch cost the whole backlog.
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-plans-'))
    const store = await openStore({ dataDir })
    const { dialect, raw } = openSqlite(path.join(dataDir, 'warren.db'))
    const seen: CompiledQuery[] = []
    const db = new Kysely<Tables>({ dialect, log: (e) => void seen.push(e.query) })
    try {
      const now = Date.now()
      const ids = Array.from({ length: 2000 }, (_, i) => `dlv_plan${String(i).padStart(5, '0')}`)
      for (let i = 0; i < ids.length; i += 500) {
        await store.db
          .insertInto('webhook_deliveries')
          .values(ids.slice(i, i + 500).map((id, k) => ({ id, subscription_id: 'whs_plan', event_seq: i + k, status: 'pending', attempts: 0, next_attempt_at: now, last_error: null, last_failed_at: null, created_at: now })))
          .execute()
      }
      const picked = ids.slice(0, 40)
      const claimed = await claimDeliveries(db, 'sqlite', { ids: picked }, now, now + 60_000)
      assert.equal(claimed.length, 40)
      await recordOutcomes(db, claimed.map((c) => ({ id: c.id, kind: 'delivered' as const, attempts: 1 })))
      const delivered = await store.db.selectFrom('webhook_deliveries').select('id').where('status', '=', 'delivered').execute()
      assert.deepEqual(delivered.map((r) => r.id).sort(), picked)

      const updates = seen.filter((q) => /^update "webhook_deliveries"/i.test(q.sql))
      assert.equal(updates.length, 2, seen.map((q) => q.sql).join('\n'))
      for (const q of updates) {
        const plan = raw.prepare(`EXPLAIN QUERY PLAN ${q.sql}`).all(...(q.parameters as never[])).map((r) => String(r.detail))
        const reads = plan.filter((line) => line.includes('webhook_deliveries'))
        assert.ok(reads.length > 0, plan.join('; '))
        for (const line of reads) assert.match(line, /\(id=\?\)/, `${q.sql}\n${plan.join('\n')}`)
      }
    } finally {
      await db.destroy()
      await store.close()
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  })
})
