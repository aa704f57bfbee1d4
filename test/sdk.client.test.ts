// What the SDK adds to the generated operations, against the running service: retries that are
// safe (a lost answer retried under the same Idempotency-Key acts once; Retry-After honoured on
// rate_limit_exceeded and never a retry on project_limit_exceeded), an event stream that resumes
// after a cut connection with nothing lost or given twice, and webhook signatures checked.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import net, { type AddressInfo } from 'node:net'
import { createWarren, ok, verifyWebhook, WarrenError, WebhookVerificationError } from '../sdk/src/index.ts'
import { startWarren, type Warren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.ts'
import { makeTestCert } from './fakes/test-cert.ts'
import { waitFor } from './fixtures.ts'

type Sent = { method: string; path: string; key: string | null; lastEventId: string | null; status: number }

/** A fetch that notes each request it sends and how it was answered. */
function noting(sent: Sent[], base: typeof fetch = globalThis.fetch): typeof fetch {
  return async (input, init) => {
    const req = new Request(input, init)
    const entry: Sent = { method: req.method, path: new URL(req.url).pathname, key: req.headers.get('idempotency-key'), lastEventId: req.headers.get('last-event-id'), status: 0 }
    sent.push(entry)
    const res = await base(req)
    entry.status = res.status
    return res
  }
}

describe('SDK retries, streams and webhooks against the service', () => {
  const cert = makeTestCert()
  let w: Warren
  let base: string
  let fake: FakeModelServer
  let receiver: WebhookReceiver
  before(async () => {
    w = await startWarren('sqlite', {
      env: { WARREN_RATE_GENERAL_PER_MIN: '1000000', WARREN_RATE_SESSIONS_PER_MIN: '100000', WARREN_ALLOW_PRIVATE_WEBHOOKS: '1', WARREN_MAX_SESSIONS_PER_ORG: '3' },
      webhookCa: cert.cert,
    })
    base = await w.listen()
    fake = await startModelServer({ models: ['m1'] })
    receiver = await startWebhookReceiver(cert)
  })
  after(async () => {
    await w?.close()
    await fake?.close()
    await receiver?.close()
    cert.remove()
  })

  /** A fresh organization with the fake model connected (a session needs one), and its token. */
  async function newOrg(): Promise<string> {
    const { token } = await w.mint()
    await ok(createWarren({ baseUrl: base, token }).api.POST('/v1/model-credentials', { body: { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] } }))
    return token
  }

  it('retries a mutation whose answer was lost under the same Idempotency-Key: one session, the first answer', async () => {
    const token = await newOrg()
    const sent: Sent[] = []
    let lost = 0
    // The first answer reaches the service and is lost on the way back, as when a connection drops.
    const losing: typeof fetch = async (input, init) => {
      const res = await fetch(input, init)
      if (lost++ === 0) throw new TypeError('fetch failed: the connection was reset')
      return res
    }
    const sdk = createWarren({ baseUrl: base, token, fetch: noting(sent, losing) })
    const s = await ok(sdk.api.POST('/v1/sessions', { body: { title: 'once' } }))
    assert.equal(sent.length, 2)
    assert.ok(sent[0]!.key, 'the first attempt already carries an Idempotency-Key')
    assert.equal(sent[1]!.key, sent[0]!.key, 'the retry carries the same key')
    const list = await ok(sdk.api.GET('/v1/sessions'))
    assert.deepEqual(list.data.map((x) => x.id), [s.id], 'the service acted once')
  })

  it('never retries project_limit_exceeded, and waits out rate_limit_exceeded', async () => {
    const token = await newOrg()
    const sent: Sent[] = []
    const sdk = createWarren({ baseUrl: base, token, fetch: noting(sent) })
    for (let i = 0; i < 3; i++) await ok(sdk.api.POST('/v1/sessions', { body: {} }))
    sent.length = 0
    const refused = await ok(sdk.api.POST('/v1/sessions', { body: {} })).catch((e: unknown) => e)
    assert.ok(refused instanceof WarrenError)
    assert.equal(refused.code, 'project_limit_exceeded')
    assert.equal(sent.length, 1, 'a ceiling is not retried: retrying never succeeds')

    // A token whose general bucket is spent: the SDK waits for Retry-After and tries again.
    const slow = await startWarren('sqlite', { env: { WARREN_RATE_GENERAL_PER_MIN: '60' } })
    try {
      const slowBase = await slow.listen()
      const slowSent: Sent[] = []
      const limited = createWarren({ baseUrl: slowBase, token: slow.token, fetch: noting(slowSent) })
      const bare = createWarren({ baseUrl: slowBase, token: slow.token, retries: 0 })
      // Spend the bucket without the SDK's retries, until the service refuses.
      for (;;) if ((await bare.api.GET('/v1/sessions')).response.status === 429) break
      const page = await ok(limited.api.GET('/v1/sessions'))
      assert.equal(page.object, 'list')
      assert.deepEqual(slowSent.map((s) => s.status).slice(0, 2), [429, 200], 'refused once, then answered after Retry-After')
    } finally {
      await slow.close()
    }
  })

  it('answers a service that cannot be reached with a WarrenError naming its address, after its retries', async () => {
    const closed = net.createServer()
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
    const address = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`
    await new Promise((resolve) => closed.close(resolve))
    const sent: Sent[] = []
    const down = createWarren({ baseUrl: address, token: 'svc_pat_x', retries: 1, fetch: noting(sent) })
    await assert.rejects(ok(down.api.GET('/v1/health')), (err: unknown) => {
      assert.ok(err instanceof WarrenError, `not a WarrenError: ${String(err)}`)
      assert.equal(err.status, 0)
      assert.equal(err.code, 'service_unreachable')
      assert.equal(err.message, `Could not reach the service at ${address} (ECONNREFUSED).`)
      return true
    })
    assert.equal(sent.length, 2, 'the retry was made before giving up')
  })

  it('resumes a cut event stream from the last persisted event: nothing lost, nothing twice', async () => {
    const token = await newOrg()
    const sdk = createWarren({ baseUrl: base, token })
    const session = await ok(sdk.api.POST('/v1/sessions', { body: { agent: { model: 'm1' } } }))

    // The first connection is cut after it has carried three persisted frames.
    const sent: Sent[] = []
    let connections = 0
    const cutting: typeof fetch = async (input, init) => {
      const res = await fetch(input, init)
      if (connections++ > 0 || !res.body) return res
      let ids = 0
      const reader = res.body.getReader()
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          const { done, value } = await reader.read()
          if (done) return controller.close()
          controller.enqueue(value)
          ids += (Buffer.from(value).toString('utf8').match(/^id: /gm) ?? []).length
          if (ids >= 3) {
            await reader.cancel()
            controller.error(new TypeError('terminated: the connection was reset'))
          }
        },
      })
      return new Response(body, { status: res.status, headers: res.headers })
    }
    const streamed = createWarren({ baseUrl: base, token, fetch: noting(sent, cutting) })
    const reconnects: (number | undefined)[] = []
    const got: number[] = []
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'echo one; echo two > two.txt' } }] }, { text: 'Done.' })
    const turn = await ok(sdk.api.POST('/v1/sessions/{session_id}/messages', { params: { path: { session_id: session.id } }, body: { text: 'go' } }))
    for await (const e of streamed.events({ sessionId: session.id, after: 0, onReconnect: ({ after }) => reconnects.push(after) })) {
      if (e.seq !== null) got.push(e.seq)
      if (e.type === 'turn.ended' && e.payload.turnId === turn.id) break
    }
    assert.equal(reconnects.length, 1, 'one cut, one reconnect')
    assert.equal(sent.length, 2)
    assert.equal(sent[0]!.lastEventId, '0')
    assert.equal(sent[1]!.lastEventId, String(reconnects[0]), 'the reconnect asks for what follows the last persisted event given')

    // The same events read in one go, uncut.
    const all: number[] = []
    for await (const e of sdk.events({ sessionId: session.id, after: 0 })) {
      if (e.seq !== null) all.push(e.seq)
      if (e.type === 'turn.ended' && e.payload.turnId === turn.id) break
    }
    assert.deepEqual(got, all, 'every persisted event once, in order')
    assert.equal(new Set(got).size, got.length)
  })

  it('verifies a real delivery and refuses a tampered one, a wrong secret and a stale timestamp', async () => {
    const token = await newOrg()
    const sdk = createWarren({ baseUrl: base, token })
    const hook = await ok(sdk.api.POST('/v1/webhooks', { body: { url: receiver.url('/sdk-hook'), events: ['session.created'] } }))
    const session = await ok(sdk.api.POST('/v1/sessions', { body: {} }))
    const [delivery] = await receiver.waitFor('/sdk-hook', 1, 30_000)
    assert.ok(delivery)
    const secret = hook.secret ?? ''
    const event = verifyWebhook({ secret, body: delivery.body, headers: delivery.headers })
    assert.equal(event.type, 'session.created')
    assert.equal(event.data.session_id, session.id)

    const refuse = (opts: Partial<Parameters<typeof verifyWebhook>[0]>, why: RegExp) =>
      assert.throws(() => verifyWebhook({ secret, body: delivery.body, headers: delivery.headers, ...opts }), (e: unknown) => e instanceof WebhookVerificationError && why.test(e.message))
    refuse({ body: delivery.body.replace(session.id, 'ses_other') }, /does not match/)
    refuse({ secret: `${secret}x` }, /does not match/)
    refuse({ now: Number(delivery.headers['x-service-timestamp']) + 10 * 60_000 }, /away from this clock/)
    refuse({ headers: { ...delivery.headers, 'x-service-signature': undefined } }, /signature header is missing/)
    await waitFor('the delivery is recorded as sent', async () => (await ok(sdk.api.GET('/v1/webhooks/{webhook_id}', { params: { path: { webhook_id: hook.id } } }))).delivery.pending === 0)
  })
})
