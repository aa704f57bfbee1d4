import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { client, details, newOrg, NO_RATE_LIMITS, signals } from './turns.helpers.ts'

const MARKER = '[The earlier part of this conversation was compacted'
const bigOutput = (bytes: number, ch: string) => `head -c ${bytes} /dev/zero | tr '\\0' '${ch}'`

forEachDialect('turns: providers, models and the context window', (dialect) => {
  let fake: FakeModelServer
  let fakeB: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    fakeB = await startModelServer({ models: ['m1'], key: 'sk-fake-second-0123456789' })
  })
  after(async () => {
    await fake.close()
    await fakeB.close()
  })

  describe('provider failures, instructions, agents and connections', () => {
    const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_PROVIDER_RETRY_DELAYS_MS: '10,10', WARREN_MODEL_STALL_MS: '3000' } })

    /** A fresh organization on the fake, with one session. */
    const setup = async (provider: 'openai' | 'anthropic' = 'openai') => {
      const org = await newOrg(w())
      const c = client(w(), org)
      const mc = await c.connect(fake, provider)
      return { org, c, mc, sid: await c.session() }
    }

    it('retries a provider 500 and completes, with exactly two model calls', async () => {
      const { c, sid } = await setup()
      const base = fake.modelRequests.length
      fake.script({ error: { status: 500 } }, { text: 'Fine after a retry.' })
      const t = await c.settled(sid, (await c.accept(sid, 'hello')).id)
      assert.equal(t.status, 'completed', JSON.stringify(t))
      assert.equal(fake.modelRequests.length - base, 2)
      assert.deepEqual(details(await c.items(sid), 'agent.message').map((d) => d.text), ['Fine after a retry.'])
    })

    it('fails with provider_error after the retries; the failed session accepts input and its next turn completes', async () => {
      const { c, sid } = await setup()
      const base = fake.modelRequests.length
      fake.script({ error: { status: 500 } }, { error: { status: 502 } }, { error: { status: 500 } })
      const failed = await c.settled(sid, (await c.accept(sid, 'hello')).id)
      assert.equal(failed.status, 'failed')
      assert.equal(failed.error?.code, 'provider_error')
      assert.equal(typeof failed.error?.message, 'string')
      assert.equal(fake.modelRequests.length - base, 3, 'one call and two retries')
      assert.equal((await c.getSession(sid)).status, 'failed')
      const errors = details(await c.items(sid), 'agent.error')
      assert.equal(errors.length, 1)
      assert.equal(errors[0]!.code, 'provider_error')

      fake.script({ text: 'Back on my feet.' })
      const next = await c.accept(sid, 'try again')
      assert.equal((await c.settled(sid, next.id)).status, 'completed')
      assert.equal((await c.getSession(sid)).status, 'idle')
      assert.deepEqual(await c.turn(sid, failed.id), failed, 'the failed turn never moves again')
      const sig = await signals(w(), sid)
      assert.deepEqual(
        sig.map((s) => [s.type, s.turnId]),
        [
          ['session.created', null],
          ['session.working', failed.id],
          ['turn.failed', failed.id],
          ['session.failed', failed.id],
          ['session.working', next.id],
          ['turn.completed', next.id],
          ['session.idle', next.id],
        ],
      )
      assert.deepEqual(sig.filter((s) => s.type.startsWith('session.') && s.type !== 'session.created').map((s) => s.payload.status), ['working', 'failed', 'working', 'idle'])
    })

    it('fails with provider_unauthorized when the provider refuses the key, without retrying', async () => {
      const org = await newOrg(w())
      const c = client(w(), org)
      const wrong = await c.call('POST', '/v1/model-credentials', { provider: 'openai', api_key: 'sk-not-the-right-key-42', base_url: fake.url, models: ['m1'] })
      assert.equal(wrong.statusCode, 201, wrong.body)
      const sid = await c.session()
      const calls = () => fake.requests.filter((r) => r.path.endsWith('/chat/completions') && r.headers.authorization === 'Bearer sk-not-the-right-key-42').length
      const t = await c.settled(sid, (await c.accept(sid, 'hello')).id)
      assert.equal(t.status, 'failed')
      assert.equal(t.error?.code, 'provider_unauthorized')
      assert.equal(calls(), 1, 'a refused key is not retried')
    })

    it('abandons a stalled stream and retries it', async () => {
      const { c, sid } = await setup('anthropic')
      const base = fake.modelRequests.length
      fake.script({ hang: true, text: 'I was saying something' }, { text: 'Answered the second time.' })
      const t = await c.settled(sid, (await c.accept(sid, 'hello')).id)
      assert.equal(t.status, 'completed', JSON.stringify(t))
      assert.equal(fake.modelRequests.length - base, 2)
      assert.deepEqual(details(await c.items(sid), 'agent.message').map((d) => d.text), ['Answered the second time.'])
    })

    it('retries a connection reset mid-stream', async () => {
      const { c, sid } = await setup()
      const base = fake.modelRequests.length
      fake.script({ reset: true, text: 'Half of a long answer that never ends' }, { text: 'The whole answer.' })
      const t = await c.settled(sid, (await c.accept(sid, 'hello')).id)
      assert.equal(t.status, 'completed', JSON.stringify(t))
      assert.equal(fake.modelRequests.length - base, 2)
      assert.deepEqual(details(await c.items(sid), 'agent.message').map((d) => d.text), ['The whole answer.'])
    })

    it('gives the standing instructions to the model on every step, on both wires', async () => {
      const org = await newOrg(w())
      const c = client(w(), org)
      const connections = { openai: await c.connect(fake, 'openai'), anthropic: await c.connect(fake, 'anthropic') }
      for (const wire of ['openai', 'anthropic'] as const) {
        const instructions = `Answer like a pirate. Mark ${wire}-7731.`
        const sid = await c.session({ agent: { model_credential_id: connections[wire], instructions } })
        assert.equal((await c.getSession(sid)).agent.instructions, instructions)
        const base = fake.modelRequests.length
        fake.script({ toolCalls: [{ name: 'todo_write', args: { items: [{ label: 'sail', status: 'in_progress' }] } }] }, { text: 'Arr, done.' })
        assert.equal((await c.settled(sid, (await c.accept(sid, 'go')).id)).status, 'completed')
        const reqs = fake.modelRequests.slice(base)
        assert.equal(reqs.length, 2)
        for (const r of reqs) {
          assert.equal(r.wire, wire)
          assert.ok(r.system?.includes(instructions), `step sent without the instructions: ${r.system}`)
        }
      }
    })

    it('runs a stored agent’s model and instructions, and a bare session on the default connection’s first model', async () => {
      const org = await newOrg(w())
      const c = client(w(), org)
      const mc = await c.connect(fake, 'openai', { models: ['m1', 'm2'] })
      const made = await c.call('POST', '/v1/agents', { name: 'reviewer', model: 'm2', instructions: 'Review with care, agent-5521.' })
      assert.equal(made.statusCode, 201, made.body)
      const withAgent = await c.session({ agent: { id: made.json().id } })
      const bare = await c.session({})
      const bareAgent = (await c.getSession(bare)).agent
      assert.equal(bareAgent.model, 'm1')
      assert.equal(bareAgent.model_credential_id, mc)

      for (const [sid, model, marker] of [[withAgent, 'm2', 'agent-5521'], [bare, 'm1', null]] as const) {
        const base = fake.modelRequests.length
        fake.script({ text: 'ok' })
        assert.equal((await c.settled(sid, (await c.accept(sid, 'hi')).id)).status, 'completed')
        const r = fake.modelRequests[base]!
        assert.equal(r.model, model)
        assert.equal(r.model, (await c.getSession(sid)).agent.model)
        assert.equal(marker === null ? !r.system?.includes('agent-5521') : r.system?.includes(marker), true)
      }
    })

    it('moves a session off a deleted connection: the next turn runs on the other; with none left it fails with provider_error', async () => {
      const org = await newOrg(w())
      const c = client(w(), org)
      const a = await c.connect(fake, 'openai')
      const b = await c.connect(fakeB, 'openai')
      const sid = await c.session()
      assert.equal((await c.getSession(sid)).agent.model_credential_id, a)
      const run = async (on: FakeModelServer | null, text: string) => {
        const counts = [fake.modelRequests.length, fakeB.modelRequests.length]
        if (on) on.script({ text: `reply to ${text}` })
        const t = await c.settled(sid, (await c.accept(sid, text)).id)
        return { t, onA: fake.modelRequests.length - counts[0]!, onB: fakeB.modelRequests.length - counts[1]! }
      }
      const first = await run(fake, 'one')
      assert.deepEqual([first.t.status, first.onA, first.onB], ['completed', 1, 0])

      const delA = await c.call('DELETE', `/v1/model-credentials/${a}`)
      assert.equal(delA.statusCode, 200, delA.body)
      assert.deepEqual(delA.json(), { object: 'model_credential.deleted', id: a, deleted: true, sessions_moved: 1, moved_to: b })
      assert.equal((await c.getSession(sid)).agent.model_credential_id, b)
      const second = await run(fakeB, 'two')
      assert.deepEqual([second.t.status, second.onA, second.onB], ['completed', 0, 1], 'the next turn ran on the remaining connection')

      const delB = await c.call('DELETE', `/v1/model-credentials/${b}`)
      assert.deepEqual(delB.json(), { object: 'model_credential.deleted', id: b, deleted: true, sessions_moved: 1, moved_to: null })
      const third = await run(null, 'three')
      assert.deepEqual([third.t.status, third.onA, third.onB], ['failed', 0, 0])
      assert.equal(third.t.error?.code, 'provider_error')
      assert.match(third.t.error!.message, /no model connection/i)
    })
  })

  describe('compaction', () => {
    const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_CONTEXT_WINDOW_TOKENS: '3000', WARREN_PROVIDER_RETRY_DELAYS_MS: 'none' } })

    /** Model calls from `base` on, each with its size and whether it carries the compaction summary. */
    const sent = (base: number) => fake.modelRequests.slice(base).map((r) => ({ size: JSON.stringify(r.messages).length, compacted: JSON.stringify(r.messages).includes(MARKER) }))

    it('compacts the conversation when it nears the window: agent.compaction, then a smaller request carrying the summary', async () => {
      const org = await newOrg(w())
      const c = client(w(), org)
      await c.connect(fake, 'openai')
      // No network tools: their definitions would take a share of this small window the sizes below do not count on.
      const sid = await c.session({ tools: [] })
      const base = fake.modelRequests.length
      const ids: string[] = []
      // Two turns with sizeable tool output and a long reply stay under 80% of the window; the
      // third message tips it over, so the conversation before it is compacted.
      for (const [ch, reply] of [['a', 'Printed the as.'], ['b', `Printed the bs. ${'All of them were bs, as asked. '.repeat(55)}`]] as const) {
        fake.script({ toolCalls: [{ name: 'bash', args: { command: bigOutput(1200, ch) } }] }, { text: reply })
        ids.push((await c.accept(sid, `print ${ch}`)).id)
        assert.equal((await c.settled(sid, ids.at(-1)!)).status, 'completed')
      }
      fake.script({ text: 'Nothing left to do.' })
      ids.push((await c.accept(sid, `What next? ${'Think about the next step. '.repeat(15)}`)).id)
      const last = await c.settled(sid, ids.at(-1)!)
      assert.equal(last.status, 'completed', JSON.stringify(last))
      assert.equal(fake.unconsumed, 0)
      const compactions = details(await c.items(sid), 'agent.compaction')
      assert.ok(compactions.length >= 1, 'the conversation was compacted')
      for (const x of compactions) {
        assert.ok(typeof x.before === 'number' && typeof x.after === 'number' && x.before > x.after, JSON.stringify(x))
        assert.ok((x.after as number) <= 3000)
      }
      const reqs = sent(base)
      const k = reqs.findIndex((r) => r.compacted)
      assert.ok(k > 0, 'a model request after the compaction carries its summary')
      assert.ok(reqs.slice(0, k).every((r) => !r.compacted))
      assert.ok(reqs[k]!.size < reqs[k - 1]!.size, `the request after compaction is smaller: ${reqs.map((r) => r.size)}`)
    })

    it('fails a turn whose single message cannot fit the window with context_length_exceeded', async () => {
      const org = await newOrg(w())
      const c = client(w(), org)
      await c.connect(fake, 'openai')
      const sid = await c.session()
      const base = fake.modelRequests.length
      const t = await c.settled(sid, (await c.accept(sid, 'x '.repeat(10_000))).id)
      assert.equal(t.status, 'failed')
      assert.equal(t.error?.code, 'context_length_exceeded')
      assert.equal(fake.modelRequests.length, base, 'nothing was sent that could not fit')
      assert.deepEqual(details(await c.items(sid), 'agent.error').map((d) => d.code), ['context_length_exceeded'])
    })

    // The second turn's bash output takes the conversation past 80% of the window (but not past
    // the window): the first turn can be summarized to make room. Last in the suite: when the turn
    // fails, its scripted reply is left unconsumed.
    it('compacts earlier turns when a tool result fills the window, instead of failing the turn', async () => {
      const org = await newOrg(w())
      const c = client(w(), org)
      await c.connect(fake, 'openai')
      const sid = await c.session()
      const base = fake.modelRequests.length
      for (const ch of ['a', 'b']) {
        fake.script({ toolCalls: [{ name: 'bash', args: { command: bigOutput(2400, ch) } }] }, { text: `Printed the ${ch}s.` })
        const t = await c.settled(sid, (await c.accept(sid, `print ${ch}`)).id)
        assert.equal(t.status, 'completed', JSON.stringify(t))
      }
      assert.ok(details(await c.items(sid), 'agent.compaction').length >= 1)
      assert.ok(sent(base).some((r) => r.compacted))
    })
  })
})
