// The PostgreSQL bus between service processes: a burst of notices (a command's thousands of file
// changes) reaches the other process whole and in order, in payloads PostgreSQL accepts.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { pgEventBus } from '../src/events/pg-event-bus.ts'
import type { EventNotice } from '../src/events/event-bus.ts'
import { onPostgres, PG_URL } from './harness.ts'

onPostgres('the PostgreSQL event bus', () => {
  // A notice lost (a payload over PostgreSQL's limit is never sent) fails it by this timeout.
  it('carries 5,000 notices of one event loop turn to another process, every one, in order', { timeout: 60_000 }, async (t) => {
    // A channel of its own: no other test run's notices arrive here.
    const schema = `t_bus_${randomBytes(6).toString('hex')}`
    const here = await pgEventBus(PG_URL, schema)
    t.after(() => here.close())
    const there = await pgEventBus(PG_URL, schema)
    t.after(() => there.close())
    const heard: EventNotice[] = []
    const all = Promise.withResolvers<void>()
    there.subscribe((n) => {
      heard.push(n)
      if (heard.length === 5000) all.resolve()
    })
    // Not all alike: the payloads fill unevenly, so a notice that overflows one shows up.
    const sent = [...Array(5000).keys()].map((i) => ({ seq: i + 1, orgId: `org_${'x'.repeat(i % 40)}`, sessionId: i % 3 ? `ses_${i}` : null, type: 'file.changed' }))
    for (const n of sent) here.notify(n)
    await all.promise
    assert.deepEqual(heard, sent)
  })
})
