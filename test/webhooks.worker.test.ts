// The delivery worker in-process: its SSRF guard and body as units, then, on both dialects,
// what needs the store in hand (a turn's artifacts column, two workers on one store).
// Deliveries through a whole `warren serve` are in webhooks.delivery.test.ts.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHmac } from 'node:crypto'
import type { LookupAddress, LookupOptions } from 'node:dns'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { KyselyPlugin } from 'kysely'
import { openStore, type Store } from '../src/db/database.ts'
import { withEvents } from '../src/events/record-event.ts'
import { newId } from '../src/shared/ids.ts'
import { secretBox } from '../src/shared/secret-box.ts'
import { insertTurn } from '../src/turns/turns.store.ts'
import { deliveryBody, signDelivery } from '../src/webhooks/delivery-body.ts'
import { DELIVERY_LIMITS, deliveryWorker, type DeliveryWorker } from '../src/webhooks/delivery-worker.ts'
import { LOOPBACK_AND_PRIVATE } from '../src/shared/address-policy.ts'
import { guardedLookup, refusedHost, type Resolver } from '../src/shared/guarded-lookup.ts'
import { deliverySender } from '../src/webhooks/send-delivery.ts'
import { claimDeliveries } from '../src/webhooks/deliveries.store.ts'
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.ts'
import { makeTestCert, type TestCert } from './fakes/test-cert.ts'
import { waitFor } from './fixtures.ts'
import { forEachDialect, startWarren, useWarren } from './harness.ts'

const REFUSED = 'deliveries to loopback, private and link-local addresses are refused unless WARREN_ALLOW_PRIVATE_WEBHOOKS lists them'

/** Runs the guard's lookup with a resolver that answers `answers` for every name and counts its calls. */
function lookUp(host: string, answers: string[], allowPrivate: string[] = [], options: LookupOptions = { all: true }) {
  const asked: string[] = []
  const resolve: Resolver = (h, _o, cb) => {
    asked.push(h)
    cb(null, answers.map((address): LookupAddress => ({ address, family: address.includes(':') ? 6 : 4 })))
  }
  return new Promise<{ err: NodeJS.ErrnoException | null; address: unknown; asked: string[] }>((done) =>
    guardedLookup({ allowPrivate, refused: REFUSED, resolve })(host, options, (err, address) => done({ err, address, asked })),
  )
}

describe('SSRF guard (injected resolver)', () => {
  it('lets a name through to exactly the public addresses it resolved to', async () => {
    const all = await lookUp('hooks.example.com', ['93.184.216.34', '2606:2800:220:1::1'])
    assert.equal(all.err, null)
    assert.deepEqual(all.address, [
      { address: '93.184.216.34', family: 4 },
      { address: '2606:2800:220:1::1', family: 6 },
    ])
    assert.deepEqual(all.asked, ['hooks.example.com'], 'resolved once')
    const one = await lookUp('hooks.example.com', ['93.184.216.34'], [], {})
    assert.equal(one.address, '93.184.216.34')
  })

  it('refuses a name when any address it resolves to is loopback, private or link-local, naming its kind, never the address', async () => {
    const cases: [string[], string][] = [
      [['127.0.0.1'], 'host rebind.example resolves to a loopback address; '],
      [['93.184.216.34', '10.0.0.7'], 'host rebind.example resolves to a private address; '],
      [['169.254.169.254'], 'host rebind.example resolves to a link-local address; '],
      [['::ffff:192.168.1.2'], 'host rebind.example resolves to a private address; '],
      [['fd00::5'], 'host rebind.example resolves to a private (unique local) address; '],
    ]
    for (const [answers, why] of cases) {
      const r = await lookUp('rebind.example', answers)
      assert.equal(r.err?.code, 'EWARRENREFUSED', JSON.stringify(answers))
      assert.equal(r.err?.message, why + REFUSED)
    }
  })

  it('refuses localhost names without asking DNS, and literals before any socket', async () => {
    for (const host of ['localhost', 'api.localhost', 'LOCALHOST.']) {
      const r = await lookUp(host, ['93.184.216.34'])
      assert.equal(r.err?.message, `host ${host.toLowerCase().replace(/\.$/, '')} is a loopback name; ${REFUSED}`)
      assert.deepEqual(r.asked, [])
    }
    assert.equal(refusedHost('[::1]', REFUSED), `host ::1 is a loopback address; ${REFUSED}`)
    assert.equal(refusedHost('10.1.2.3', REFUSED), `host 10.1.2.3 is a private address; ${REFUSED}`)
    assert.equal(refusedHost('93.184.216.34', REFUSED), null)
    assert.equal(refusedHost('hooks.example.com', REFUSED), null)
  })

  it('opens only the CIDRs the deployment lists: loopback when listed, the metadata address only when named', async () => {
    const r = await lookUp('localhost', ['127.0.0.1'], ['127.0.0.1/32'])
    assert.equal(r.err, null)
    assert.deepEqual(r.address, [{ address: '127.0.0.1', family: 4 }])
    const gpu = await lookUp('localhost', ['127.0.0.1'], ['10.0.5.0/24'])
    assert.equal(gpu.err?.message, `host localhost is a loopback name; ${REFUSED}`)
    assert.deepEqual(gpu.asked, [], 'refused before any lookup')
    assert.equal((await lookUp('gpu.internal', ['10.0.5.7'], ['10.0.5.0/24'])).err, null)
    assert.match((await lookUp('gpu.internal', ['10.0.6.7'], ['10.0.5.0/24'])).err?.message ?? '', /resolves to a private address; /)
    // What WARREN_ALLOW_PRIVATE_WEBHOOKS=1 means: loopback and the private ranges, never the metadata address.
    for (const allowed of [[...LOOPBACK_AND_PRIVATE], ['169.254.0.0/16'], ['0.0.0.0/0']]) {
      const meta = await lookUp('metadata.internal', ['169.254.169.254'], allowed)
      assert.match(meta.err?.message ?? '', /resolves to a link-local address; /, String(allowed))
      assert.match((await lookUp('aws6.internal', ['fd00:ec2::254'], allowed)).err?.message ?? '', /resolves to/, String(allowed))
    }
    assert.equal((await lookUp('metadata.internal', ['169.254.169.254'], ['169.254.169.254/32'])).err, null, 'named exactly')
    assert.match((await lookUp('wide.internal', ['127.0.0.1'], ['0.0.0.0/0'])).err?.message ?? '', /resolves to a loopback address/, 'a wide CIDR does not open loopback')
  })
})

describe('delivery body and signature', () => {
  it('names the objects and nothing more, in a fixed shape', () => {
    const base = { createdAt: 1700000000123, sessionId: 'ses_1', turnId: null }
    assert.equal(
      deliveryBody({ ...base, type: 'session.created', payload: { session_id: 'ses_1' } }),
      '{"object":"event","type":"session.created","created_at":1700000000123,"data":{"session_id":"ses_1"}}',
    )
    assert.equal(
      deliveryBody({ ...base, type: 'session.action_required', payload: { session_id: 'ses_1', status: 'requires_action', turn_id: 'trn_1', required_action: { type: 'function_call', call_id: 'c', name: 'n' } } }),
      '{"object":"event","type":"session.action_required","created_at":1700000000123,"data":{"session_id":"ses_1","turn_id":"trn_1","required_action":{"type":"function_call"}}}',
    )
    assert.equal(
      deliveryBody({ ...base, turnId: 'trn_2', type: 'turn.failed', payload: { session_id: 'ses_1', turn_id: 'trn_2', status: 'cancelled' } }),
      '{"object":"event","type":"turn.failed","created_at":1700000000123,"data":{"session_id":"ses_1","turn_id":"trn_2"}}',
    )
  })

  it('signs {timestamp}.{body} with the whole secret, lowercase hex', () => {
    const body = '{"object":"event"}'
    const expected = createHmac('sha256', 'whsec_abc').update(`1700000000123.${body}`).digest('hex')
    assert.equal(signDelivery('whsec_abc', '1700000000123', body), expected)
    assert.match(expected, /^[0-9a-f]{64}$/)
  })
})

const box = secretBox(Buffer.alloc(32, 7))
let cert: TestCert
let receiver: WebhookReceiver
before(async () => {
  cert = makeTestCert()
  receiver = await startWebhookReceiver(cert)
})
after(async () => {
  await receiver?.close()
  cert?.remove()
})

describe('an attempt (one HTTPS request)', () => {
  /** One attempt; `trust: false` leaves the receiver's certificate untrusted. */
  const post = (url: string, signal = new AbortController().signal, trust = true) => {
    const sender = deliverySender({ allowPrivate: ['127.0.0.1/32'], timeoutMs: 300, maxSockets: 4, ...(trust ? { ca: cert.cert } : {}) })
    return sender.send({ url, headers: { 'content-type': 'application/json' }, body: '{}' }, signal).finally(() => sender.close())
  }

  it('succeeds on 2xx only, and says why it failed otherwise', async () => {
    receiver.script('/answers', [204, 301, 418])
    assert.deepEqual(await post(receiver.url('/answers')), { ok: true })
    assert.deepEqual(await post(receiver.url('/answers')), { ok: false, reason: 'receiver answered 301' }, 'redirects are not followed')
    assert.deepEqual(await post(receiver.url('/answers')), { ok: false, reason: 'receiver answered 418' })
    receiver.script('/silent', ['hang'])
    assert.deepEqual(await post(receiver.url('/silent')), { ok: false, reason: 'timed out after 300 ms' })
    assert.deepEqual(await post(receiver.url('/answers'), undefined, false), { ok: false, reason: 'TLS: self-signed certificate' })
    const closed = http.createServer()
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r))
    const port = (closed.address() as AddressInfo).port
    await new Promise((r) => closed.close(r))
    assert.deepEqual(await post(`https://127.0.0.1:${port}/`), { ok: false, reason: 'connection refused (ECONNREFUSED)' })
  })

  it('gives up uncounted when the service stops', async () => {
    receiver.script('/stop', ['hang'])
    const abort = new AbortController()
    const pending = post(receiver.url('/stop'), abort.signal)
    await receiver.waitFor('/stop', 1)
    abort.abort()
    assert.deepEqual(await pending, { aborted: true })
  })
})

forEachDialect('the service’s own delivery worker', (dialect) => {
  it('the harness runs the service as a deployment does: what a session emits is delivered without a worker of the test’s', async () => {
    const w = await startWarren(dialect, { env: { WARREN_ALLOW_PRIVATE_WEBHOOKS: '1' }, webhookCa: cert.cert })
    try {
      const path = `/assembled-${dialect}`
      const { token, orgId } = await w.mint()
      const res = await w.inject({ method: 'POST', url: '/v1/webhooks', token, payload: { url: receiver.url(path, '127.0.0.1'), events: ['session.created'] } })
      assert.equal(res.statusCode, 201, res.body)
      const sessionId = newId('ses')
      await withEvents(w.store, w.bus, (_trx, record) => record({ orgId, sessionId, type: 'session.created', payload: { session_id: sessionId } }))
      const [got] = await receiver.waitFor(path, 1)
      assert.equal(JSON.parse(got!.body).data.session_id, sessionId)
      await waitFor('recorded as delivered', async () => {
        const row = await w.store.db.selectFrom('webhook_deliveries').select('status').where('subscription_id', '=', res.json().id).executeTakeFirst()
        return row?.status === 'delivered'
      })
    } finally {
      await w.close()
    }
  })
})

describe('the delivery worker logs through the service’s logger [sqlite]', () => {
  it('a failure to look for due deliveries is a structured warning in the service log, not a bare line on stderr', async () => {
    const lines: string[] = []
    const w = await startWarren('sqlite', { logger: { level: 'warn', stream: { write: (line: string) => void lines.push(line) } } })
    const bare: string[] = []
    const write = process.stderr.write
    process.stderr.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
      bare.push(String(chunk))
      return (write as (...a: unknown[]) => boolean).call(process.stderr, chunk, ...rest)
    }) as typeof process.stderr.write
    try {
      // Without its table, the worker's next look (it polls) fails.
      await w.store.db.schema.alterTable('webhook_deliveries').renameTo('webhook_deliveries_away').execute()
      await waitFor('the failure in the service log', async () => lines.some((l) => l.includes('looking for due deliveries failed')), 20_000)
      const entry = JSON.parse(lines.find((l) => l.includes('looking for due deliveries failed'))!)
      assert.equal(entry.level, 40, 'a warning')
      assert.match(entry.err.message, /webhook_deliveries/)
      assert.equal(bare.filter((l) => l.includes('warren: webhooks')).length, 0, bare.join(''))
    } finally {
      process.stderr.write = write
      await w.store.db.schema.alterTable('webhook_deliveries_away').renameTo('webhook_deliveries').execute()
      await w.close()
    }
  })
})

forEachDialect('webhook delivery worker', (dialect) => {
  // The workers here are the tests' own (trusting the receiver, with their own waits): the service's stays stopped.
  const w = useWarren(dialect, { env: { WARREN_ALLOW_PRIVATE_WEBHOOKS: '1', WARREN_WEBHOOK_RETRY_DELAYS_MS: '0,100,100,100,100,100' }, deliveries: false })
  const workers: DeliveryWorker[] = []
  let second: Store | undefined
  /**
   * The store as another process sees it: on PostgreSQL a pool of its own. A second SQLite
   * connection in this process would block the event loop on the first one's lock (node:sqlite
   * waits synchronously), so there it is the same store.
   */
  const secondStore = async () =>
    dialect === 'sqlite' ? w().store : (second ??= await openStore({ dataDir: w().dataDir, databaseUrl: w().config.databaseUrl, pgSchema: w().pgSchema }))
  const startWorker = (overrides: { turnCompletedWaitMs?: number } = {}, store = w().store) => {
    const worker = deliveryWorker({ store, bus: w().bus, box, config: { ...w().config, ...overrides }, ca: cert.cert })
    workers.push(worker)
    worker.start()
    return worker
  }
  after(async () => {
    await Promise.all(workers.map((x) => x.close()))
    await second?.close()
  })

  /** A subscription of a fresh organization to `events` at the receiver's `path`. */
  async function subscribe(path: string, events: string[]) {
    const { token, orgId } = await w().mint()
    const res = await w().inject({ method: 'POST', url: '/v1/webhooks', token, payload: { url: receiver.url(path, '127.0.0.1'), events } })
    assert.equal(res.statusCode, 201, res.body)
    return { id: res.json().id as string, orgId, token }
  }

  /** A completed turn whose artifacts are still publishing, and its turn.completed event. */
  async function completedTurn(orgId: string) {
    const sessionId = newId('ses')
    return withEvents(w().store, w().bus, async (trx, record) => {
      const turn = await insertTurn(trx, { id: newId('trn'), sessionId, orgId, text: 'x', queuedPosition: null, now: Date.now() })
      await trx.updateTable('turns').set({ status: 'completed', completed_at: Date.now(), artifacts: 'pending' }).where('id', '=', turn.id).execute()
      const event = await record({ orgId, sessionId, turnId: turn.id, type: 'turn.completed', payload: { session_id: sessionId, turn_id: turn.id, status: 'completed' } })
      return { sessionId, turnId: turn.id, event }
    })
  }

  /** `n` committed session.created events of the organization, of sessions `${prefix}_0` … */
  const sessionsCreated = (orgId: string, prefix: string, n: number) =>
    withEvents(w().store, w().bus, async (_trx, record) => {
      for (let i = 0; i < n; i++) await record({ orgId, sessionId: `${prefix}_${i}`, type: 'session.created', payload: { session_id: `${prefix}_${i}` } })
    })

  const deliveryOf = (subscriptionId: string) => w().store.db.selectFrom('webhook_deliveries').selectAll().where('subscription_id', '=', subscriptionId).executeTakeFirstOrThrow()

  it('holds turn.completed while the turn publishes its artifacts, uncounted, and sends it once they are ready', async () => {
    const path = `/held-${dialect}`
    const sub = await subscribe(path, ['turn.completed'])
    const worker = startWorker({ turnCompletedWaitMs: 120_000 })
    const { sessionId, turnId, event } = await completedTurn(sub.orgId)
    // Looked at again and again (its due time moves on each time), never sent, never counted.
    const seen = new Set<number>()
    await waitFor('three looks at the held delivery', async () => {
      const row = await deliveryOf(sub.id)
      seen.add(Number(row.next_attempt_at))
      return seen.size >= 4
    })
    assert.equal(receiver.received(path).length, 0)
    const held = await deliveryOf(sub.id)
    assert.equal(held.status, 'pending')
    assert.equal(held.attempts, 0)
    assert.equal(held.last_error, null)

    await w().store.db.updateTable('turns').set({ artifacts: 'ready' }).where('id', '=', turnId).execute()
    const [got] = await receiver.waitFor(path, 1)
    assert.equal(got!.body, JSON.stringify({ object: 'event', type: 'turn.completed', created_at: event.createdAt, data: { session_id: sessionId, turn_id: turnId } }))
    await waitFor('delivered', async () => (await deliveryOf(sub.id)).status === 'delivered')
    const row = await deliveryOf(sub.id)
    assert.equal(row.attempts, 1)
    assert.equal(row.next_attempt_at, null)
    await worker.close()
  })

  it('sends turn.completed anyway once the wait for artifacts runs out', async () => {
    const path = `/held-out-${dialect}`
    const sub = await subscribe(path, ['turn.completed'])
    const worker = startWorker({ turnCompletedWaitMs: 400 })
    const { event, turnId } = await completedTurn(sub.orgId)
    const [got] = await receiver.waitFor(path, 1)
    assert.ok(got!.at >= event.createdAt + 400, `sent ${got!.at - event.createdAt} ms after the event, before the wait ran out`)
    assert.equal(JSON.parse(got!.body).data.turn_id, turnId)
    const turn = await w().store.db.selectFrom('turns').select('artifacts').where('id', '=', turnId).executeTakeFirstOrThrow()
    assert.equal(turn.artifacts, 'pending', 'control: publication never finished')
    await waitFor('delivered', async () => (await deliveryOf(sub.id)).status === 'delivered')
    assert.equal((await deliveryOf(sub.id)).attempts, 1)
    await worker.close()
  })

  it('concurrent claims of the same deliveries never share one', async () => {
    const sub = await subscribe(`/claims-${dialect}`, ['session.created'])
    await sessionsCreated(sub.orgId, 'ses_claim', 50)
    const other = await secondStore()
    const ids = (await w().store.db.selectFrom('webhook_deliveries').select('id').where('subscription_id', '=', sub.id).execute()).map((r) => r.id)
    const now = Date.now()
    const claims = await Promise.all(
      Array.from({ length: 10 }, (_, i) => claimDeliveries((i % 2 ? other : w().store).db, dialect, i < 6 ? { ids } : { subscriptionId: sub.id, limit: 20 }, now, now + 60_000)),
    )
    const won = claims.flat().map((c) => c.id)
    assert.equal(won.length, 50, 'every delivery claimed once')
    assert.deepEqual([...new Set(won)].sort(), [...ids].sort())
    await w().inject({ method: 'DELETE', url: `/v1/webhooks/${sub.id}`, token: sub.token })
  })

  it('claims a fast receiver\'s next deliveries ahead as leases, and gives them back uncounted and due at once when it closes', async () => {
    const path = `/ahead-${dialect}`
    const sub = await subscribe(path, ['session.created'])
    const N = 40
    await sessionsCreated(sub.orgId, 'ses_ahead', N)
    // The first answers come at once; the rest hang, so the lanes fill and what was claimed ahead waits.
    receiver.script(path, [200, 200, 200, 200, 'hang'])
    const first = startWorker()
    await receiver.waitFor(path, 8)
    const rows = () => w().store.db.selectFrom('webhook_deliveries').selectAll().where('subscription_id', '=', sub.id).execute()
    await waitFor('the answered four recorded', async () => (await rows()).filter((r) => r.status === 'delivered').length === 4)
    const leased = (await rows()).filter((r) => r.status === 'pending' && Number(r.next_attempt_at) > Date.now())
    assert.ok(leased.length > 4, `more claimed than its four lanes hold (${leased.length})`)
    await first.close()
    const closedAt = Date.now()
    const after = await rows()
    const left = after.filter((r) => r.status !== 'delivered')
    assert.equal(left.length, N - 4)
    assert.deepEqual(left.filter((r) => r.status !== 'pending' || Number(r.attempts) !== 0 || Number(r.next_attempt_at) > closedAt), [], 'given back uncounted and due at once')
    receiver.release(path)
    const second = startWorker()
    await waitFor('every delivery delivered', async () => (await rows()).every((r) => r.status === 'delivered'))
    assert.deepEqual([...new Set((await rows()).map((r) => Number(r.attempts)))], [1], 'one counted attempt each')
    await second.close()
  })

  it('does not claim again for a subscription whose backlog a claim found empty, until something new may be due', async () => {
    const hook = `/drained-${dialect}`
    const sub = await subscribe(hook, ['session.created'])
    const N = 30
    await sessionsCreated(sub.orgId, 'ses_drained', N)
    // Claims are the worker's only updates that return rows.
    let claims = 0
    const counting: KyselyPlugin = {
      transformQuery: (args) => {
        if (args.node.kind === 'UpdateQueryNode' && args.node.returning) claims++
        return args.node
      },
      transformResult: async (args) => args.result,
    }
    const store = { ...w().store, db: w().store.db.withPlugin(counting) }
    // No poll during the test: only what the worker does on its own after each attempt is counted.
    const worker = deliveryWorker({ store, bus: w().bus, box, config: w().config, ca: cert.cert }, { ...DELIVERY_LIMITS, pollMs: 600_000 })
    workers.push(worker)
    worker.start()
    const rows = () => w().store.db.selectFrom('webhook_deliveries').select('status').where('subscription_id', '=', sub.id).execute()
    await waitFor('every delivery delivered', async () => (await rows()).every((r) => r.status === 'delivered'))
    await receiver.waitFor(hook, N)
    const afterDrain = claims
    // The first claims take everything (the pump's, then one ahead of the lanes); one that comes
    // back short ends them. Before, every finishing attempt claimed again and found nothing.
    assert.ok(afterDrain <= 4, `${afterDrain} claims for ${N} deliveries of one subscription`)
    // Something new is due: the committed events wake the worker, which claims again, ahead too
    // (the look it makes first takes only the subscription's lanes' worth).
    await sessionsCreated(sub.orgId, 'ses_drained_more', N)
    await receiver.waitFor(hook, 2 * N)
    await waitFor('the new ones delivered', async () => (await rows()).every((r) => r.status === 'delivered'))
    assert.ok(claims > afterDrain)
    await worker.close()
  })

  it('two workers on one store deliver every event exactly once', async () => {
    const path = `/pair-${dialect}`
    const sub = await subscribe(path, ['session.created'])
    const pair = [startWorker(), startWorker({}, await secondStore())]
    const N = 200
    for (let batch = 0; batch < N / 20; batch++) {
      await withEvents(w().store, w().bus, async (_trx, record) => {
        for (let i = 0; i < 20; i++) {
          const sessionId = `ses_pair_${batch * 20 + i}`
          await record({ orgId: sub.orgId, sessionId, type: 'session.created', payload: { session_id: sessionId } })
        }
      })
    }
    await waitFor(
      'every delivery delivered',
      async () => {
        const rows = await w().store.db.selectFrom('webhook_deliveries').select('status').where('subscription_id', '=', sub.id).execute()
        return rows.length === N && rows.every((r) => r.status === 'delivered')
      },
      30_000,
    )
    // Closed, nothing can be in flight: what the receiver has is all it will get.
    await Promise.all(pair.map((x) => x.close()))
    const got = receiver.received(path)
    const ids = got.map((r) => r.headers['x-warren-delivery'])
    assert.equal(new Set(ids).size, N)
    assert.equal(got.length, N, 'no delivery was sent twice')
    const sessions = new Set(got.map((r) => JSON.parse(r.body).data.session_id))
    assert.equal(sessions.size, N)
  })
})
