// A model connection's base_url is the caller's: the service connects there, so it is judged by
// the one outbound policy, with WARREN_MODEL_ALLOW_PRIVATE listing where self-hosted model servers
// may be (the harness lists 127.0.0.1/32, where the fake model servers live). Refused addresses
// get no connection attempt: a listener on another loopback address counts them. What a refused
// or failed call reports never repeats the far end's bytes beyond the provider's own error message.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import net, { type AddressInfo } from 'node:net'
import { errorOf, forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { client, newOrg, NO_RATE_LIMITS } from './turns.helpers.ts'

/** A listener on 127.0.0.2 (not in the harness's list) that counts the connections it is sent. */
async function startTrap() {
  const trap = { connections: 0, port: 0, close: () => new Promise<void>((r) => server.close(() => r())) }
  const server = net.createServer((s) => {
    trap.connections++
    s.destroy()
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.2', r))
  trap.port = (server.address() as AddressInfo).port
  return trap
}

const SECRET_BYTES = 'FAR-END-SECRET-7c1e'

forEachDialect('model addresses behind the outbound policy', (dialect) => {
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_PROVIDER_RETRY_DELAYS_MS: '10' } })
  let fake: FakeModelServer
  let trap: Awaited<ReturnType<typeof startTrap>>
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    trap = await startTrap()
  })
  after(async () => {
    await fake.close()
    await trap.close()
  })

  it('refuses a base_url at a loopback port not listed, whether or not the models are asked for, with nothing sent', async () => {
    const c = client(w(), await newOrg(w()))
    for (const base_url of [`http://127.0.0.2:${trap.port}/v1`, `http://[::ffff:127.0.0.2]:${trap.port}/v1`]) {
      for (const models of [undefined, ['m1']]) {
        const res = await c.call('POST', '/v1/model-credentials', { provider: 'openai_compatible', api_key: 'sk-x', base_url, ...(models ? { models } : {}) })
        assert.equal(res.statusCode, 400, res.body)
        assert.equal(errorOf(res).code, 'invalid_request')
        assert.match(errorOf(res).message, /is a loopback address: .*WARREN_MODEL_ALLOW_PRIVATE/, base_url)
      }
    }
    assert.equal(trap.connections, 0)
  })

  it('refuses the metadata, private and unspecified addresses before any connection', async () => {
    const c = client(w(), await newOrg(w()))
    const urls = ['http://169.254.169.254/latest/meta-data', 'http://[fd00:ec2::254]/v1', 'http://100.100.100.200/v1', 'http://10.0.5.7:8000/v1', `http://0.0.0.0:${trap.port}/v1`, 'http://[fe80::1]/v1']
    for (const base_url of urls) {
      const res = await c.call('POST', '/v1/model-credentials', { provider: 'openai_compatible', api_key: 'sk-x', base_url })
      assert.equal(res.statusCode, 400, `${base_url}: ${res.body}`)
      assert.match(errorOf(res).message, /WARREN_MODEL_ALLOW_PRIVATE/, base_url)
    }
    assert.equal(trap.connections, 0)
  })

  it('reaches a model server in the listed CIDR, for the models list and for the model', async () => {
    const c = client(w(), await newOrg(w()))
    const res = await c.call('POST', '/v1/model-credentials', { provider: 'openai_compatible', api_key: fake.key, base_url: fake.url })
    assert.equal(res.statusCode, 201, res.body)
    assert.deepEqual(res.json().models, ['m1'])
    const sid = await c.session()
    fake.script({ text: 'hello from the listed range' })
    assert.equal((await c.settled(sid, (await c.accept(sid, 'hi')).id)).status, 'completed')
  })

  it('fails a model step whose connection points at an address not listed, without connecting or retrying', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    const id = await c.connect(fake, 'openai')
    // A connection stored before the policy (or under a wider one): the step judges it again.
    await w().store.db.updateTable('model_credentials').set({ base_url: `http://127.0.0.2:${trap.port}/v1` }).where('id', '=', id).execute()
    const sid = await c.session()
    const before = fake.modelRequests.length
    const t = await c.settled(sid, (await c.accept(sid, 'hi')).id)
    assert.equal(t.status, 'failed')
    assert.equal(t.error?.code, 'provider_error')
    assert.match(t.error!.message, /host 127\.0\.0\.2 is a loopback address: .*WARREN_MODEL_ALLOW_PRIVATE/)
    assert.doesNotMatch(t.error!.message, /gave up after/, 'refused once, not retried')
    assert.equal(trap.connections, 0)
    assert.equal(fake.modelRequests.length, before)
  })

  it("a failed model call reports the provider's own error message, never other bytes the far end sent", async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const run = async () => {
      const sid = await c.session()
      return c.settled(sid, (await c.accept(sid, 'hi')).id)
    }
    try {
      fake.override = () => ({ status: 400, body: { error: { message: 'The model m1 is not served here.', type: 'invalid_request_error' } } })
      const own = await run()
      assert.equal(own.status, 'failed')
      assert.match(own.error!.message, /The model m1 is not served here\./)
      const answers = [
        { status: 400, body: `<html><title>${SECRET_BYTES}</title></html>`, headers: { 'content-type': 'text/html' } },
        { status: 502, body: `{"not_the_protocol":"${SECRET_BYTES}"}` },
        { status: 200, frames: [`data: ${SECRET_BYTES}\n\n`, 'data: [DONE]\n\n'], headers: { 'content-type': 'text/event-stream' } },
        { status: 200, frames: [`data: {"choices":"${SECRET_BYTES}"}\n\n`, 'data: [DONE]\n\n'], headers: { 'content-type': 'text/event-stream' } },
      ]
      for (const answer of answers) {
        fake.override = () => answer
        const t = await run()
        assert.equal(t.status, 'failed', JSON.stringify(answer))
        assert.ok(!t.error!.message.includes(SECRET_BYTES), `echoed: ${t.error!.message}`)
        const items = await c.call('GET', `/v1/sessions/${t.session_id}/items`)
        assert.ok(!items.body.includes(SECRET_BYTES), `echoed in the items: ${items.body}`)
      }
    } finally {
      fake.override = null
    }
  })
})

forEachDialect('model addresses when WARREN_MODEL_ALLOW_PRIVATE lists only other ranges', (dialect) => {
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_MODEL_ALLOW_PRIVATE: '10.0.5.0/24,::1/128' } })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  it('refuses the loopback model server, by address and by a name resolving to it, before any connection', async () => {
    const c = client(w(), await newOrg(w()))
    const before = fake.requests.length
    const literal = await c.call('POST', '/v1/model-credentials', { provider: 'openai_compatible', api_key: fake.key, base_url: fake.url })
    assert.equal(literal.statusCode, 400, literal.body)
    assert.match(errorOf(literal).message, /host 127\.0\.0\.1 is a loopback address: .*WARREN_MODEL_ALLOW_PRIVATE/)
    // localhost passes the first look (::1 is listed) and is judged by what it resolves to.
    const named = await c.call('POST', '/v1/model-credentials', { provider: 'openai_compatible', api_key: fake.key, base_url: fake.url.replace('127.0.0.1', 'localhost') })
    assert.equal(named.statusCode, 400, named.body)
    assert.equal(errorOf(named).code, 'invalid_request')
    assert.match(errorOf(named).message, /host localhost resolves to an address this deployment does not allow; .*WARREN_MODEL_ALLOW_PRIVATE/)
    assert.doesNotMatch(errorOf(named).message, /127\.0\.0\.1/, 'what the name resolved to is not told')
    // With the models given, the name is stored; the step judges what it resolves to.
    const kept = await c.call('POST', '/v1/model-credentials', { provider: 'openai_compatible', api_key: fake.key, base_url: fake.url.replace('127.0.0.1', 'localhost'), models: ['m1'] })
    assert.equal(kept.statusCode, 201, kept.body)
    const sid = await c.session()
    const t = await c.settled(sid, (await c.accept(sid, 'hi')).id)
    assert.equal(t.status, 'failed')
    assert.match(t.error!.message, /host localhost resolves to an address this deployment does not allow: .*WARREN_MODEL_ALLOW_PRIVATE/)
    assert.equal(fake.requests.length, before, 'nothing reached the model server')
  })
})
