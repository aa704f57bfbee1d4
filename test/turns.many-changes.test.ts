// A command that changes thousands of files: its result and every change are recorded, in order,
// without holding the service (the event loop, and on SQLite its only connection) meanwhile.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { monitorEventLoopDelay, performance } from 'node:perf_hooks'
import { setImmediate } from 'node:timers/promises'
import { withEvents } from '../src/events/record-event.ts'
import { forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { client, newOrg, NO_RATE_LIMITS } from './turns.helpers.ts'

forEachDialect('turns: a command that changes many files', (dialect) => {
  const w = useWarren(dialect, { env: NO_RATE_LIMITS })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  it('records every change of a call that made 5,000 files, once each, in path order, after its result; another organization is served meanwhile', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    const otherOrg = await newOrg(w())
    const other = client(w(), otherOrg)
    await other.connect(fake, 'openai')
    const theirs = await other.session()
    // A write that records an event: on PostgreSQL it waits for the lock that orders every event.
    const putTools = () => w().inject({ method: 'PUT', url: `/v1/sessions/${theirs}/tools`, token: otherOrg.token, payload: { tools: [] } })

    /**
     * Runs a turn whose bash calls make `n` files in a new folder, then remove it, while another
     * organization sets its session's tools again and again, until the turn has settled: the
     * longest the event loop was blocked, the longest one of those writes took, and the turn's items.
     */
    const run = async (n: number) => {
      const dir = `made${n}`
      // Removed by a second call, so that nothing is left to publish: what is measured is the calls.
      fake.script({ toolCalls: [{ name: 'bash', args: { command: `mkdir ${dir} && cd ${dir} && seq ${n} | xargs touch` } }] }, { toolCalls: [{ name: 'bash', args: { command: `rm -r ${dir}` } }] }, { text: 'Done.' })
      const loop = monitorEventLoopDelay({ resolution: 1 })
      loop.enable()
      const accepted = await c.accept(sid, `make ${n} files`)
      let slowest = 0
      for (;;) {
        const t0 = performance.now()
        const res = await putTools()
        assert.equal(res.statusCode, 200, res.body)
        slowest = Math.max(slowest, performance.now() - t0)
        const t = await c.turn(sid, accepted.id)
        if (t.status !== 'working' && t.artifacts !== 'pending') break
        // An injected request never waits on I/O: without this the loop would starve the turn.
        await setImmediate()
      }
      loop.disable()
      const items = (await c.items(sid)).filter((i) => i.turn_id === accepted.id)
      return { blocked: loop.max / 1e6, slowest, items, dir }
    }

    await run(1) // the sandbox's start, not measured
    const small = await run(50)
    const large = await run(5000)
    process.stdout.write(`# ${dialect}: 50 files: loop blocked ${small.blocked.toFixed(1)} ms, slowest write ${small.slowest.toFixed(1)} ms; 5,000 files: ${large.blocked.toFixed(1)} ms, ${large.slowest.toFixed(1)} ms\n`)

    // Every change is recorded, after the result it belongs to, in path order, each once.
    const events = large.items.map((i) => i.detail.event)
    const paths = [...Array(5000).keys()].map((i) => `${large.dir}/${i + 1}`).sort()
    const results = events.flatMap((e, at) => (e === 'agent.tool_result' ? [at] : []))
    assert.equal(results.length, 2)
    for (const [at, kind] of [[results[0]!, 'created'], [results[1]!, 'deleted']] as const) {
      const changes = large.items.slice(at + 1, at + 5001)
      assert.ok(changes.every((i) => i.detail.event === 'file.changed' && i.detail.kind === kind), kind)
      assert.deepEqual(changes.map((i) => i.detail.path), paths)
    }
    assert.deepEqual(events.slice(results[0]! + 5001, results[1]! + 1), ['agent.tool_call', 'agent.tool_result'])
    assert.deepEqual(events.slice(results[1]! + 5001), ['agent.message', 'turn.ended'])

  })

  it('records a thousand events a chunk at a time, the event loop turning between chunks (on SQLite nothing else would let it)', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sessionId = await c.session()
    let turns = 0
    let spinning = true
    const spin = (async () => {
      while (spinning) (await setImmediate(), turns++)
    })()
    const { during, seqs } = await withEvents(w().store, w().bus, async (_trx, record) => {
      const from = turns
      const events = Array.from({ length: 1200 }, (_, i) => ({ orgId: org.orgId, sessionId, turnId: 'trn_chunks', type: 'file.changed' as const, payload: { path: `f${i}`, kind: 'created' as const } }))
      const stored = await record.all(events)
      return { during: turns - from, seqs: stored.map((e) => e.seq) }
    })
    spinning = false
    await spin
    assert.ok(during >= 2, `the event loop turned ${during} times while 1,200 events were recorded`)
    assert.equal(seqs.length, 1200)
    assert.ok(seqs.every((seq, i) => i === 0 || seq === seqs[i - 1]! + 1), 'one run of seqs, in order')
  })
})
