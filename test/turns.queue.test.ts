import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { errorOf, forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { client, collectTransient, details, modelSteps, newOrg, NO_RATE_LIMITS, seqOf, signals, TURN_KEYS, type Provider } from './turns.helpers.ts'
import { hostWorkspace } from './host-workspace.ts'

const WIRE: Record<Provider, 'openai' | 'anthropic'> = { openai: 'openai', anthropic: 'anthropic', openai_compatible: 'openai' }

forEachDialect('turns: the run, the queue, cancel and steer', (dialect) => {
  const w = useWarren(dialect, { env: NO_RATE_LIMITS })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  for (const provider of ['openai', 'anthropic', 'openai_compatible'] as const) {
    it(`runs a turn on the ${provider} connection: bash, then a reply, every fact recorded in order`, async () => {
      const org = await newOrg(w())
      const c = client(w(), org)
      const mc = await c.connect(fake, provider)
      const sid = await c.session()
      const live = collectTransient(w(), sid)
      const base = fake.modelRequests.length
      const reply = 'Made the file; it says hi.'
      const thinking = 'The file should be checked first.'
      fake.script(
        { toolCalls: [{ name: 'bash', args: { command: 'printf "hi\\n" > made.txt; cat made.txt' } }], usage: { input: 101, output: 11 } },
        { thinking, text: reply, usage: { input: 202, output: 22 } },
      )
      const t0 = Date.now()
      const res = await c.send(sid, { text: 'make a file' })
      const t1 = Date.now()
      assert.equal(res.statusCode, 202, res.body)
      const accepted = res.json()
      assert.deepEqual(Object.keys(accepted).sort(), TURN_KEYS)
      assert.match(accepted.id, /\S/)
      assert.equal(accepted.object, 'turn')
      assert.equal(accepted.session_id, sid)
      assert.equal(accepted.status, 'working')
      assert.ok(accepted.created_at >= t0 && accepted.created_at <= t1, 'created_at is when the input was accepted')
      assert.equal(accepted.completed_at, null)
      assert.equal(accepted.error, null)
      assert.equal(accepted.subagent_id, null)
      assert.deepEqual(accepted.artifacts_skipped, [])

      const done = await c.settled(sid, accepted.id)
      live.stop()
      assert.equal(done.status, 'completed', JSON.stringify(done))
      assert.equal(done.error, null)
      assert.equal(done.subagent_id, null)
      assert.equal(done.created_at, accepted.created_at)
      assert.equal(typeof done.started_at, 'number')
      assert.ok(done.started_at! >= done.created_at)
      assert.ok(done.completed_at! >= done.started_at!)
      assert.equal(done.artifacts, 'ready', 'a settled turn has published its files')

      const all = await c.items(sid)
      const seqs = all.map((i) => seqOf(i.id))
      assert.ok(seqs.every((s, i) => i === 0 || s > seqs[i - 1]!), `item ids strictly increase: ${all.map((i) => i.id)}`)
      const mine = all.filter((i) => i.turn_id === accepted.id)
      assert.deepEqual(
        mine.map((i) => i.detail.event),
        ['turn.started', 'user.message', 'agent.tool_call', 'agent.tool_result', 'file.changed', 'agent.message', 'turn.ended', 'artifact.created'],
      )
      assert.deepEqual({ ...mine.at(-1)!.detail, id: null }, { event: 'artifact.created', id: null, path: 'made.txt', size_bytes: 3, turn_id: accepted.id })
      const [started, user, call, result, changed, message, ended] = mine.map((i) => i.detail)
      assert.deepEqual(started, { event: 'turn.started', turnId: accepted.id })
      assert.deepEqual(user, { event: 'user.message', text: 'make a file' })
      assert.deepEqual(call, { event: 'agent.tool_call', toolCallId: call!.toolCallId, toolName: 'bash', args: { command: 'printf "hi\\n" > made.txt; cat made.txt' } })
      assert.match(String(call!.toolCallId), /\S/)
      assert.deepEqual({ ...result, summary: null }, { event: 'agent.tool_result', toolCallId: call!.toolCallId, toolName: 'bash', isError: false, cancelled: false, summary: null })
      assert.ok(typeof result!.summary === 'string' && result!.summary.length > 0, 'the tool result carries a summary')
      assert.equal(changed!.path, 'made.txt')
      assert.equal(changed!.kind, 'created')
      assert.deepEqual(message, { event: 'agent.message', text: reply })
      assert.deepEqual(ended, { event: 'turn.ended', turnId: accepted.id })
      assert.equal(mine.find((i) => i.detail.event === 'agent.tool_result')!.type, 'tool_call', 'a tool result is a tool_call item')
      const when = (e: string) => mine.find((i) => i.detail.event === e)!.created_at
      assert.ok(done.started_at! <= when('turn.started') && when('agent.message') <= done.completed_at!)

      const reqs = (await fake.waitForModelRequests(base + 2)).slice(base)
      assert.equal(reqs.length, 2)
      for (const r of reqs) {
        assert.equal(r.wire, WIRE[provider])
        assert.equal(r.model, 'm1')
      }
      assert.equal(reqs[0]!.lastUserText, 'make a file')
      assert.equal(reqs[1]!.toolResults.length, 1)
      assert.equal(reqs[1]!.toolResults[0]!.toolCallId, call!.toolCallId)
      assert.match(reqs[1]!.toolResults[0]!.content, /^hi\n/, 'the tool output reached the model')
      assert.notEqual(reqs[1]!.toolResults[0]!.isError, true)

      const text = live.events.filter((e) => e.type === 'agent.text')
      assert.ok(text.length >= 2, 'the reply streamed in several deltas')
      assert.ok(text.every((e) => e.turnId === accepted.id && e.orgId === org.orgId))
      assert.equal(text.map((e) => e.payload.delta).join(''), reply)
      if (provider === 'anthropic') {
        assert.equal(live.events.filter((e) => e.type === 'agent.thinking').map((e) => e.payload.delta).join(''), thinking)
      }
      assert.deepEqual(await modelSteps(w(), accepted.id), [
        { step: 1, model: 'm1', model_credential_id: mc, input_tokens: 101, output_tokens: 11 },
        { step: 2, model: 'm1', model_credential_id: mc, input_tokens: 202, output_tokens: 22 },
      ])

      // Another turn runs; the settled one never moves again.
      fake.script({ text: 'Second reply.' })
      const second = await c.accept(sid, 'and again')
      assert.equal((await c.settled(sid, second.id)).status, 'completed')
      assert.deepEqual(await c.turn(sid, accepted.id), done, 'the settled turn never moves again')
      assert.deepEqual((await c.turns(sid)).map((t) => t.id), [accepted.id, second.id])
      assert.equal(fake.unconsumed, 0)
    })
  }

  it('queues five messages behind a running turn, refuses a sixth, runs them in order; cancels a waiting turn and the running one', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session()
    const dir = hostWorkspace(w(), sid)
    const ticks = path.join(dir, 'ticks')
    const base = fake.modelRequests.length
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'while :; do echo x >> ticks; sleep 0.05; done' } }] })
    const running = await c.accept(sid, 'run forever')
    await waitFor('the command runs', async () => fs.existsSync(ticks))
    assert.equal((await c.getSession(sid)).status, 'working')

    const waiting = []
    for (let i = 1; i <= 5; i++) {
      const t = await c.accept(sid, `q${i}`)
      assert.equal(t.status, 'working')
      assert.equal(t.started_at, null, 'a waiting turn has not started')
      assert.notEqual(t.id, running.id)
      waiting.push(t)
    }
    const full = await c.send(sid, { text: 'one too many' })
    assert.equal(full.statusCode, 429, full.body)
    assert.equal(errorOf(full).code, 'queue_full')
    const queued = (await c.items(sid)).filter((i) => i.detail.event === 'message.queued')
    assert.deepEqual(
      queued.map((i) => [i.turn_id, i.detail]),
      waiting.map((t, i) => [t.id, { event: 'message.queued', text: `q${i + 1}`, position: i + 1 }]),
    )
    for (const t of waiting) assert.equal((await c.turn(sid, t.id)).started_at, null)

    // A waiting turn cancelled never starts, and frees its place.
    const q3 = waiting[2]!
    const cancelled = await c.cancel(sid, q3.id)
    assert.equal(cancelled.statusCode, 200, cancelled.body)
    assert.equal(cancelled.json().status, 'cancelled')
    assert.equal(cancelled.json().started_at, null)
    assert.equal(typeof cancelled.json().completed_at, 'number')
    assert.equal(cancelled.json().error, null)
    assert.equal((await c.turn(sid, running.id)).status, 'working', 'the running turn is left alone')
    const q6 = await c.accept(sid, 'q6')
    const order = [waiting[0]!, waiting[1]!, waiting[3]!, waiting[4]!, q6]
    fake.script(...order.map((t, i) => ({ text: `reply ${i}` })))

    // The running turn is stopped, its command killed.
    const stop = await c.cancel(sid, running.id)
    assert.equal(stop.statusCode, 200, stop.body)
    assert.equal(stop.json().status, 'cancelled')
    assert.equal(typeof stop.json().started_at, 'number')
    const size = fs.statSync(ticks).size
    for (const t of order) assert.equal((await c.settled(sid, t.id)).status, 'completed')
    await sleep(300)
    assert.equal(fs.statSync(ticks).size, size, 'the cancelled command is gone')
    const again = await c.cancel(sid, running.id)
    assert.equal(again.statusCode, 409, again.body)
    assert.equal(errorOf(again).code, 'conflict')
    assert.equal((await c.cancel(sid, q3.id)).statusCode, 409)

    const all = await c.items(sid)
    const result = all.filter((i) => i.turn_id === running.id && i.detail.event === 'agent.tool_result')
    assert.equal(result.length, 1)
    assert.equal(result[0]!.detail.cancelled, true)
    assert.equal(result[0]!.detail.isError, true)
    assert.deepEqual(all.filter((i) => i.detail.event === 'turn.started').map((i) => i.turn_id), [running.id, ...order.map((t) => t.id)])
    assert.deepEqual(
      all.filter((i) => i.detail.event === 'message.dequeued').map((i) => [i.turn_id, i.detail.text, i.detail.position]),
      order.map((t, i) => [t.id, ['q1', 'q2', 'q4', 'q5', 'q6'][i], [1, 2, 4, 5, 5][i]]),
    )
    assert.deepEqual(all.filter((i) => i.turn_id === q3.id).map((i) => i.detail.event), ['message.queued', 'turn.ended'], 'the cancelled waiting turn never started')
    for (const t of order) {
      assert.deepEqual(
        all.filter((i) => i.turn_id === t.id).map((i) => i.detail.event),
        ['message.queued', 'message.dequeued', 'turn.started', 'user.message', 'agent.message', 'turn.ended'],
      )
    }
    const reqs = fake.modelRequests.slice(base)
    assert.deepEqual(reqs.map((r) => r.lastUserText), ['run forever', 'q1', 'q2', 'q4', 'q5', 'q6'])

    const turns = await c.turns(sid)
    assert.deepEqual(turns.map((t) => [t.id, t.status]), [
      [running.id, 'cancelled'],
      ...waiting.map((t) => [t.id, t === q3 ? 'cancelled' : 'completed']),
      [q6.id, 'completed'],
    ])
    assert.equal(turns.find((t) => t.id === q3.id)!.started_at, null)
    const ran = [running.id, ...order.map((t) => t.id)].map((id) => turns.find((t) => t.id === id)!)
    for (let i = 1; i < ran.length; i++) assert.ok(ran[i]!.started_at! >= ran[i - 1]!.completed_at!, 'one turn at a time, in order')
    assert.deepEqual(
      (await signals(w(), sid)).filter((s) => s.type.startsWith('session.')).map((s) => s.type),
      ['session.created', ...ran.map(() => 'session.working'), 'session.idle'],
    )
    assert.equal((await c.getSession(sid)).status, 'idle')
    assert.equal(fake.unconsumed, 0)
  })

  it('steers text into the running turn: no new turn, user.message recorded, the model reads it at its next step', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session()
    const dir = hostWorkspace(w(), sid)
    const base = fake.modelRequests.length
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'touch started; while [ ! -f go ]; do sleep 0.05; done; echo released' } }] }, { text: 'Done, tests too.' })
    const turn = await c.accept(sid, 'build it')
    await waitFor('the command runs', async () => fs.existsSync(path.join(dir, 'started')))
    const steer = 'Also add tests, please.'
    const res = await c.send(sid, { text: steer, steer: true })
    assert.equal(res.statusCode, 202, res.body)
    assert.equal(res.json().id, turn.id, 'the response is the running turn')
    assert.equal(res.json().status, 'working')
    await waitFor('user.message', async () => (await c.items(sid)).some((i) => i.detail.event === 'user.message' && i.detail.text === steer && i.turn_id === turn.id))
    fs.writeFileSync(path.join(dir, 'go'), '')
    assert.equal((await c.settled(sid, turn.id)).status, 'completed')
    const reqs = fake.modelRequests.slice(base)
    assert.equal(reqs.length, 2)
    assert.ok(!JSON.stringify(reqs[0]!.messages).includes(steer))
    assert.ok(JSON.stringify(reqs[1]!.messages).includes(steer), 'the steered text reached the next model step')
    assert.equal(reqs[1]!.lastUserText, steer)
    assert.equal(reqs[1]!.toolResults.length, 1)
    assert.deepEqual((await c.turns(sid)).map((t) => t.id), [turn.id], 'no new turn')
    const all = await c.items(sid)
    assert.deepEqual(details(all, 'user.message').map((d) => d.text), ['build it', steer])
    assert.equal(all.filter((i) => i.detail.event === 'message.queued').length, 0)
    assert.equal(fake.unconsumed, 0)
  })

  it('leaves no session and no turn behind when a create with input is refused', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const base = fake.modelRequests.length
    const unknown = await c.call('POST', '/v1/sessions', { input: 'hello', surprise: true })
    assert.equal(unknown.statusCode, 400, unknown.body)
    assert.equal(errorOf(unknown).code, 'invalid_request')
    const model = await c.call('POST', '/v1/sessions', { input: 'hello', agent: { model: 'not-connected-model' } })
    assert.equal(model.statusCode, 400, model.body)
    assert.equal(errorOf(model).code, 'invalid_request')
    assert.match(errorOf(model).message, /not-connected-model/)
    assert.deepEqual((await c.call('GET', '/v1/sessions?limit=100')).json().data, [])
    const turns = await w().store.db.selectFrom('turns').select('id').where('org_id', '=', org.orgId).execute()
    assert.deepEqual(turns, [])
    await sleep(100)
    assert.equal(fake.modelRequests.length, base)
  })

  it('runs the input given at creation as the first turn', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const base = fake.modelRequests.length
    fake.script({ text: 'Hello from the opening turn.' })
    const sid = await c.session({ input: 'opening words' })
    const turns = await c.turns(sid)
    assert.equal(turns.length, 1)
    // Put last in the suite: when the turn never runs, its scripted reply is left unconsumed.
    const t = await c.settled(sid, turns[0]!.id, 8000).catch(() => c.turn(sid, turns[0]!.id))
    assert.equal(t.status, 'completed', `the opening turn did not run: ${JSON.stringify(t)}`)
    assert.equal(fake.modelRequests[base]?.lastUserText, 'opening words')
    const all = await c.items(sid)
    assert.deepEqual(details(all, 'user.message').map((d) => d.text), ['opening words'])
    assert.deepEqual(details(all, 'agent.message').map((d) => d.text), ['Hello from the opening turn.'])
  })
})
