// Webhook deliveries from a real `warren serve` (a child process) to a real HTTPS receiver whose
// self-signed certificate the child trusts through NODE_EXTRA_CA_CERTS, read only at start. The
// receiver answers by path, so each test scripts its own subscription's receiver.
//
// SQLite only: the child opens its store from WARREN_DATA_DIR, the way a deployment starts. Two
// workers on one PostgreSQL store are covered in-process by webhooks.worker.test.ts.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import dns from 'node:dns/promises'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { makeTestCert } from './fakes/test-cert.ts'
import { startWebhookReceiver, type Received, type WebhookReceiver } from './fakes/webhook-receiver.ts'
import { waitFor } from './fixtures.ts'
import { serviceProcess, type ServiceProcess } from './service-process.ts'

const cert = makeTestCert()
let receiver: WebhookReceiver
before(async () => {
  receiver = await startWebhookReceiver(cert)
})
after(async () => {
  await receiver?.close()
  cert.remove()
})

type Delivery = { pending: number; dead: number; last_error: string | null; last_failed_at: number | null }

/**
 * A `warren serve` on a fresh data folder with `env`, started before the describe's tests with a
 * token of its own organization and a model connection, stopped after them.
 */
function useService(env: Record<string, string>, modelUrl?: () => string) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-webhooks-'))
  const svc = serviceProcess({
    WARREN_DATA_DIR: dataDir,
    NODE_EXTRA_CA_CERTS: cert.certPath,
    WARREN_SANDBOX_PREFIX: 'h' + randomBytes(2).toString('hex'),
    WARREN_LOG_LEVEL: 'warn',
    WARREN_RATE_GENERAL_PER_MIN: '100000',
    WARREN_RATE_SESSIONS_PER_MIN: '100000',
    WARREN_MAX_SESSIONS_PER_ORG: '1000',
    WARREN_PROVIDER_RETRY_DELAYS_MS: 'none',
    ...env,
  })
  before(async () => {
    svc.token = await svc.mint('webhooks')
    await svc.start()
    const mc = await svc.api('POST', '/v1/model-credentials', { provider: 'openai', api_key: 'sk-fake-0123456789abcdef', models: ['m1'], ...(modelUrl ? { base_url: modelUrl() } : {}) })
    assert.equal(mc.status, 201, mc.text)
  })
  after(async () => {
    try {
      if (svc.running) await svc.stop('SIGTERM')
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  })
  return { svc, dataDir }
}

async function subscribe(svc: ServiceProcess, url: string, events: string[]): Promise<{ id: string; secret: string }> {
  const res = await svc.api('POST', '/v1/webhooks', { url, events })
  assert.equal(res.status, 201, res.text)
  return { id: res.body.id, secret: res.body.secret }
}

/** Removes the subscription, so that later tests' events are not sent to it. */
async function unsubscribe(svc: ServiceProcess, id: string): Promise<void> {
  assert.equal((await svc.api('DELETE', `/v1/webhooks/${id}`)).status, 200)
}

async function createSession(svc: ServiceProcess, body: Record<string, unknown> = {}): Promise<string> {
  const res = await svc.api('POST', '/v1/sessions', body)
  assert.equal(res.status, 201, res.text)
  return res.body.id
}

async function deliveryOf(svc: ServiceProcess, id: string): Promise<Delivery> {
  const res = await svc.api('GET', `/v1/webhooks/${id}`)
  assert.equal(res.status, 200, res.text)
  return res.body.delivery
}

const deliveryWhen = (svc: ServiceProcess, id: string, what: string, ok: (d: Delivery) => boolean) =>
  waitFor(`subscription ${id}: ${what}`, async () => {
    const d = await deliveryOf(svc, id)
    return ok(d) && d
  })

/**
 * What a receiver does, as the README shows it: its `verify` is taken from README.md (the code up
 * to the example server) and run here, so the documented receiver is checked against real deliveries.
 */
const readmeVerify = await (async () => {
  const readme = fs.readFileSync(path.join(import.meta.dirname, '..', 'README.md'), 'utf8')
  const block = /A receiver that verifies a delivery[^]*?```ts\n([^]*?)```/.exec(readme)?.[1]
  assert.ok(block, 'README.md shows a receiver that verifies a delivery')
  const code = block.slice(0, block.indexOf('http.createServer'))
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'warren-readme-')), 'verify.ts')
  fs.writeFileSync(file, code)
  return ((await import(file)) as { verify: (secret: string, ts: string, body: Buffer, sig: string, now?: number) => boolean }).verify
})()

function verifies(r: Received, secret: string): boolean {
  return readmeVerify(secret, String(r.headers['x-service-timestamp']), Buffer.from(r.body, 'utf8'), String(r.headers['x-service-signature']), r.at)
}

describe('webhook deliveries from warren serve [sqlite, child process]', () => {
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(async () => {
    await fake?.close()
  })
  const { svc } = useService(
    { WARREN_ALLOW_PRIVATE_WEBHOOKS: '1', WARREN_WEBHOOK_RETRY_DELAYS_MS: '0,300,300,300,300,300', WARREN_WEBHOOK_TIMEOUT_MS: '2000' },
    () => fake.url,
  )

  it('sends signed bodies that name the session and turn, and nothing more', async () => {
    const sub = await subscribe(svc, receiver.url('/all'), ['session.created', 'session.working', 'session.action_required', 'session.idle', 'session.failed', 'turn.completed', 'turn.failed'])
    const t0 = Date.now()
    const sessionId = await createSession(svc, { tools: [{ type: 'function', name: 'approve_refund', description: 'Approve a refund' }] })
    fake.script({ toolCalls: [{ id: 'call_refund', name: 'approve_refund', args: { order: 'o-17' } }] })
    const sent = await svc.api('POST', `/v1/sessions/${sessionId}/messages`, { text: 'refund o-17' })
    assert.equal(sent.status, 202, sent.text)
    const turnId: string = sent.body.id
    await receiver.waitFor('/all', 3)
    // Deleting the session cancels the parked turn: turn.failed.
    assert.equal((await svc.api('DELETE', `/v1/sessions/${sessionId}`)).status, 200)
    const got = await receiver.waitFor('/all', 4)
    const t1 = Date.now()

    const byType = new Map(got.map((r) => [JSON.parse(r.body).type as string, r]))
    assert.deepEqual([...byType.keys()].sort(), ['session.action_required', 'session.created', 'session.working', 'turn.failed'])
    const expected: Record<string, unknown> = {
      'session.created': { session_id: sessionId },
      'session.working': { session_id: sessionId, turn_id: turnId },
      'session.action_required': { session_id: sessionId, turn_id: turnId, required_action: { type: 'function_call' } },
      'turn.failed': { session_id: sessionId, turn_id: turnId },
    }
    for (const [type, r] of byType) {
      const body = JSON.parse(r.body)
      assert.deepEqual(Object.keys(body), ['object', 'type', 'created_at', 'data'], r.body)
      assert.equal(body.object, 'event')
      assert.deepEqual(body.data, expected[type], type)
      assert.ok(Number.isInteger(body.created_at) && body.created_at >= t0 && body.created_at <= t1, `${type} created_at ${body.created_at}`)
      assert.equal(r.headers['content-type'], 'application/json')
      assert.equal(r.headers['user-agent'], 'warren-webhooks/0.1')
      const ts = String(r.headers['x-service-timestamp'])
      assert.match(ts, /^\d{13}$/, 'Unix milliseconds')
      assert.ok(Math.abs(Number(ts) - r.at) < 5000, `timestamp ${ts} is ${r.at - Number(ts)} ms from the receiver's clock`)
      assert.match(String(r.headers['x-service-signature']), /^[0-9a-f]{64}$/)
      assert.equal(verifies(r, sub.secret), true, `${type}: the signature verifies with the subscription secret`)
      assert.equal(verifies(r, sub.secret.slice(0, -1) + (sub.secret.endsWith('A') ? 'B' : 'A')), false, `${type}: and not with another`)
      // Another body: the session id's last character changed (to something it is not already).
      const altered = sessionId.slice(0, -1) + (sessionId.endsWith('0') ? '1' : '0')
      assert.equal(verifies({ ...r, body: r.body.replace(sessionId, altered) }, sub.secret), false, `${type}: and not over another body`)
      assert.equal(verifies({ ...r, at: r.at + 10 * 60_000 }, sub.secret), false, `${type}: and not ten minutes later (a replayed delivery)`)
    }
    const ids = got.map((r) => String(r.headers['x-warren-delivery']))
    assert.ok(ids.every((id) => /^dlv_[0-9a-z]{24}$/.test(id)), ids.join())
    assert.equal(new Set(ids).size, 4, 'one delivery id per event')
    assert.deepEqual(await deliveryWhen(svc, sub.id, 'nothing pending', (d) => d.pending === 0), { pending: 0, dead: 0, last_error: null, last_failed_at: null })
    await unsubscribe(svc, sub.id)
  })

  it('retries a failed attempt on the schedule with the same bytes, and keeps the reason', async () => {
    receiver.script('/retry', [500, 200])
    const sub = await subscribe(svc, receiver.url('/retry'), ['session.created'])
    await createSession(svc)
    const [first, second] = await receiver.waitFor('/retry', 2)
    assert.equal(second!.body, first!.body, 'the same body bytes')
    assert.equal(second!.headers['x-warren-delivery'], first!.headers['x-warren-delivery'], 'the same delivery')
    assert.ok(Number(second!.headers['x-service-timestamp']) > Number(first!.headers['x-service-timestamp']), 'a timestamp of its own')
    assert.equal(verifies(second!, sub.secret), true)
    const d = await deliveryWhen(svc, sub.id, 'delivered', (x) => x.pending === 0)
    assert.equal(d.dead, 0)
    assert.equal(d.last_error, 'receiver answered 500')
    assert.ok(d.last_failed_at! >= first!.at && d.last_failed_at! <= second!.at, `last_failed_at ${d.last_failed_at} between the attempts ${first!.at}..${second!.at}`)
    assert.equal(receiver.received('/retry').length, 2)
    await unsubscribe(svc, sub.id)
  })

  it('gives up after the sixth failure: dead, with the reason; a receiver that does not answer in time has failed', async () => {
    receiver.script('/dead', ['hang', 'hang', 503])
    const sub = await subscribe(svc, receiver.url('/dead'), ['session.created'])
    await createSession(svc)
    // The first attempt was abandoned at the time-out, and is what the second answers.
    await receiver.waitFor('/dead', 2)
    const meanwhile = await deliveryOf(svc, sub.id)
    assert.deepEqual({ ...meanwhile, last_failed_at: null }, { pending: 1, dead: 0, last_error: 'timed out after 2000 ms', last_failed_at: null })
    const d = await deliveryWhen(svc, sub.id, 'dead', (x) => x.dead === 1)
    const got = receiver.received('/dead')
    assert.equal(got.length, 6, 'six attempts, no more')
    assert.equal(new Set(got.map((r) => r.body)).size, 1)
    assert.equal(new Set(got.map((r) => r.headers['x-warren-delivery'])).size, 1)
    assert.deepEqual({ ...d, last_failed_at: null }, { pending: 0, dead: 1, last_error: 'receiver answered 503', last_failed_at: null })
    assert.ok(d.last_failed_at! >= got[5]!.at)
    await unsubscribe(svc, sub.id)
  })
})

describe('webhook deliveries across a SIGKILL, and a stuck receiver [sqlite, child process]', () => {
  // A receiver time-out far longer than the test: the stuck receiver's four attempts stay open.
  const { svc, dataDir } = useService({ WARREN_ALLOW_PRIVATE_WEBHOOKS: '1', WARREN_WEBHOOK_RETRY_DELAYS_MS: '0,3000,300,300,300,300', WARREN_WEBHOOK_TIMEOUT_MS: '60000' })

  it('a receiver that never answers holds four attempts at most and delays no other subscription', async () => {
    receiver.script('/stuck', ['hang'])
    const stuck = await subscribe(svc, receiver.url('/stuck'), ['session.created'])
    const fast = await subscribe(svc, receiver.url('/fast'), ['session.created'])
    for (let i = 0; i < 10; i++) await createSession(svc)
    const got = await receiver.waitFor('/fast', 10)
    assert.equal(new Set(got.map((r) => r.headers['x-warren-delivery'])).size, 10)
    await receiver.waitFor('/stuck', 4)
    assert.equal(receiver.received('/stuck').length, 4, 'the stuck receiver holds its four attempts and gets no more')
    assert.equal(receiver.held('/stuck'), 4)
    assert.deepEqual(await deliveryWhen(svc, fast.id, 'delivered', (d) => d.pending === 0), { pending: 0, dead: 0, last_error: null, last_failed_at: null })
    assert.equal((await deliveryOf(svc, stuck.id)).pending, 10)

    receiver.release('/stuck', 200)
    await receiver.waitFor('/stuck', 10)
    assert.deepEqual(await deliveryWhen(svc, stuck.id, 'delivered', (d) => d.pending === 0), { pending: 0, dead: 0, last_error: null, last_failed_at: null })
    await unsubscribe(svc, stuck.id)
    await unsubscribe(svc, fast.id)
  })

  it('a restart in the middle of the schedule resumes it: the second attempt comes after the restart, counted as the second', async () => {
    receiver.script('/restart', [500, 200])
    const sub = await subscribe(svc, receiver.url('/restart'), ['session.created'])
    await createSession(svc)
    const [first] = await receiver.waitFor('/restart', 1)
    const failed = await deliveryWhen(svc, sub.id, 'the first failure recorded', (d) => d.last_error !== null)
    assert.equal(failed.last_error, 'receiver answered 500')
    assert.equal(receiver.received('/restart').length, 1, 'control: killed while the delivery waits for its second attempt')

    const how = await svc.stop('SIGKILL')
    assert.equal(how.signal, 'SIGKILL')
    await svc.start()
    const [, second] = await receiver.waitFor('/restart', 2)
    assert.equal(second!.headers['x-warren-delivery'], first!.headers['x-warren-delivery'])
    assert.equal(second!.body, first!.body)
    assert.ok(second!.at >= failed.last_failed_at! + 3000, 'the second attempt keeps its place in the schedule')
    const d = await deliveryWhen(svc, sub.id, 'delivered', (x) => x.pending === 0)
    assert.deepEqual(d, { pending: 0, dead: 0, last_error: 'receiver answered 500', last_failed_at: failed.last_failed_at })
    assert.equal(receiver.received('/restart').length, 2)
    const db = new DatabaseSync(path.join(dataDir, 'warren.db'), { readOnly: true })
    try {
      const row = db.prepare('SELECT status, attempts FROM webhook_deliveries WHERE subscription_id = ?').get(sub.id)
      assert.deepEqual({ ...row }, { status: 'delivered', attempts: 2 })
    } finally {
      db.close()
    }
    await unsubscribe(svc, sub.id)
  })
})

describe('webhook deliveries to a name resolving to a private address [sqlite, child process]', () => {
  const { svc } = useService({ WARREN_WEBHOOK_RETRY_DELAYS_MS: '0,100,100,100,100,100' })

  it('are never sent, and the subscription says why', async (t) => {
    const vm = await dns.lookup('vm').catch(() => null)
    if (vm?.address !== '127.0.0.1') {
      const why = `this machine's name "vm" resolves to ${vm?.address ?? 'nothing'}, not 127.0.0.1`
      process.stdout.write(`# SKIPPED SSRF through delivery: ${why}\n`)
      return t.skip(why)
    }
    // Creation judges only literals and localhost names; the name is judged on delivery, resolved.
    const sub = await subscribe(svc, receiver.url('/ssrf', 'vm'), ['session.created'])
    await createSession(svc)
    const d = await deliveryWhen(svc, sub.id, 'dead', (x) => x.dead === 1)
    assert.equal(
      d.last_error,
      'host vm resolves to a loopback address; deliveries to loopback, private and link-local addresses are refused unless WARREN_ALLOW_PRIVATE_WEBHOOKS lists them',
    )
    assert.equal(d.pending, 0)
    assert.equal(receiver.received('/ssrf').length, 0, 'the receiver got nothing')
  })
})
