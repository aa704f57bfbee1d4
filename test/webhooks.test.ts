import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { secretBox } from '../src/shared/secret-box.ts'
import { getSubscriptionSecret } from '../src/webhooks/webhooks.store.ts'
import { errorOf, forEachDialect, useWarren, type Warren } from './harness.ts'

const HOOK = 'https://hooks.example.com/warren'

const create = (w: Warren, payload: unknown, token?: string) => w.inject({ method: 'POST', url: '/v1/webhooks', payload: payload as object, token })

/** A delivery row as the outbox and the later worker write them. */
const delivery = (subscriptionId: string, status: string, extra: { last_error?: string; last_failed_at?: number; created_at?: number } = {}) => ({
  id: `dlv_test_${Math.random().toString(36).slice(2)}`,
  subscription_id: subscriptionId,
  event_seq: 1,
  status,
  attempts: status === 'dead' ? 6 : 1,
  next_attempt_at: status === 'pending' ? Date.now() : null,
  last_error: extra.last_error ?? null,
  last_failed_at: extra.last_failed_at ?? null,
  created_at: extra.created_at ?? Date.now(),
})

forEachDialect('webhook subscriptions', (dialect) => {
  // Rows are written by hand here and counted as written: no worker may send them meanwhile.
  const w = useWarren(dialect, { deliveries: false })

  it('creates a subscription and shows the secret once, sealed at rest', async () => {
    const res = await create(w(), { url: HOOK, events: ['session.idle', 'session.created'] })
    assert.equal(res.statusCode, 201)
    const sub = res.json()
    assert.equal(sub.object, 'webhook.subscription')
    assert.match(sub.id, /^whk_/)
    assert.equal(sub.url, HOOK)
    assert.deepEqual(sub.events, ['session.idle', 'session.created'])
    assert.equal(sub.active, true)
    assert.equal(typeof sub.created_at, 'number')
    assert.match(sub.secret, /^whsec_[A-Za-z0-9_-]{43}$/)
    assert.deepEqual(sub.delivery, { pending: 0, dead: 0, last_error: null, last_failed_at: null })

    const one = await w().inject({ method: 'GET', url: `/v1/webhooks/${sub.id}` })
    assert.equal(one.statusCode, 200)
    assert.equal('secret' in one.json(), false)
    assert.equal(one.body.includes(sub.secret), false)
    const list = await w().inject({ method: 'GET', url: '/v1/webhooks' })
    assert.ok(list.json().data.some((s: { id: string }) => s.id === sub.id))
    assert.equal(list.body.includes('secret'), false)

    const row = await w().store.db.selectFrom('webhook_subscriptions').selectAll().where('id', '=', sub.id).executeTakeFirstOrThrow()
    assert.equal(row.secret_enc.includes(sub.secret.slice(6)), false)
    assert.equal(await getSubscriptionSecret(w().store.db, secretBox(Buffer.alloc(32, 7)), sub.id), sub.secret)
    assert.equal(await getSubscriptionSecret(w().store.db, secretBox(Buffer.alloc(32, 7)), 'whk_missing'), null)
  })

  it('refuses a url that is not https, naming url', async () => {
    for (const url of ['http://hooks.example.com/x', 'ftp://hooks.example.com/x', 'hooks.example.com/x']) {
      const res = await create(w(), { url, events: ['session.created'] })
      assert.equal(res.statusCode, 400, url)
      const err = errorOf(res)
      assert.equal(err.code, 'invalid_request')
      assert.match(err.message, /url/)
    }
    assert.match(errorOf(await create(w(), { url: 'http://hooks.example.com/x', events: ['session.created'] })).message, /https/)
  })

  it('refuses loopback, private and link-local hosts by default, saying why', async () => {
    const cases: [string, RegExp][] = [
      ['https://127.0.0.1/h', /loopback/],
      ['https://localhost:8443/h', /loopback name/],
      ['https://api.localhost/h', /loopback name/],
      ['https://10.1.2.3/h', /private/],
      ['https://172.16.0.9/h', /private/],
      ['https://192.168.1.1/h', /private/],
      ['https://169.254.169.254/latest', /link-local/],
      ['https://[::1]/h', /loopback/],
      ['https://[fd00::1]/h', /private/],
      ['https://[fe80::1]/h', /link-local/],
      ['https://[::ffff:127.0.0.1]/h', /loopback/],
      ['https://2130706433/h', /loopback/],
      ['https://0.0.0.0/h', /unspecified/],
    ]
    for (const [url, why] of cases) {
      const res = await create(w(), { url, events: ['session.created'] })
      assert.equal(res.statusCode, 400, url)
      const err = errorOf(res)
      assert.equal(err.code, 'invalid_request')
      assert.match(err.message, why, url)
      assert.match(err.message, /WARREN_ALLOW_PRIVATE_WEBHOOKS/)
    }
    // Public addresses and names pass; names are judged again on delivery, after resolution.
    assert.equal((await create(w(), { url: 'https://93.184.216.34/h', events: ['session.created'] })).statusCode, 201)
    assert.equal((await create(w(), { url: 'https://172.32.0.1/h', events: ['session.created'] })).statusCode, 201)
  })

  it("documents url as the deployment's CIDR list, not the old on/off switch", async () => {
    const doc = (await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })).json() as { components: { schemas: Record<string, { properties: Record<string, { description: string }> }> } }
    const said = doc.components.schemas.CreateWebhookRequest!.properties.url!.description
    assert.match(said, /lists in WARREN_ALLOW_PRIVATE_WEBHOOKS/)
    assert.doesNotMatch(said, /sets WARREN_ALLOW_PRIVATE_WEBHOOKS/)
  })

  it('validates events against the webhook vocabulary', async () => {
    const bad: [unknown, RegExp][] = [
      [[], /events/],
      [['session.created', 'session.created'], /events/],
      [['turn.started'], /events\[0\].*session\.created/],
      [['session.created', 'nope'], /events\[1\]/],
      ['session.created', /events/],
    ]
    for (const [events, msg] of bad) {
      const res = await create(w(), { url: HOOK + '/v', events })
      assert.equal(res.statusCode, 400, JSON.stringify(events))
      assert.match(errorOf(res).message, msg)
    }
    assert.match(errorOf(await create(w(), { url: HOOK })).message, /Missing required field "events"/)
    assert.match(errorOf(await create(w(), { url: HOOK, events: ['session.created'], active: false })).message, /Unknown field "active"/)
  })

  it('gives 409 naming the existing subscription for the same url and event set in any order', async () => {
    const { orgId: _, token } = await w().mint()
    const url = 'https://hooks.example.com/dup'
    const first = (await create(w(), { url, events: ['turn.completed', 'turn.failed', 'session.idle'] }, token)).json()
    const dup = await create(w(), { url, events: ['session.idle', 'turn.failed', 'turn.completed'] }, token)
    assert.equal(dup.statusCode, 409)
    const err = errorOf(dup)
    assert.equal(err.code, 'conflict')
    assert.ok(err.message.includes(first.id), err.message)

    const subset = await create(w(), { url, events: ['turn.completed', 'turn.failed'] }, token)
    assert.equal(subset.statusCode, 201)
    const otherUrl = await create(w(), { url: url + '2', events: ['turn.completed', 'turn.failed', 'session.idle'] }, token)
    assert.equal(otherUrl.statusCode, 201)
    // Another organization may subscribe the same url and set.
    assert.equal((await create(w(), { url, events: ['session.idle', 'turn.failed', 'turn.completed'] })).statusCode, 201)
  })

  it('lets only one of two racing identical creates through', async () => {
    const { token } = await w().mint()
    const payload = { url: HOOK + '/race', events: ['session.created', 'session.idle'] }
    const both = await Promise.all([create(w(), payload, token), create(w(), payload, token)])
    assert.deepEqual(both.map((r) => r.statusCode).sort(), [201, 409])
  })

  it('computes delivery counters from the deliveries', async () => {
    const { token } = await w().mint()
    const a = (await create(w(), { url: HOOK, events: ['turn.completed'] }, token)).json()
    const b = (await create(w(), { url: HOOK, events: ['turn.failed'] }, token)).json()
    const t = Date.now()
    await w()
      .store.db.insertInto('webhook_deliveries')
      .values([
        delivery(a.id, 'pending'),
        delivery(a.id, 'pending', { last_error: 'connect ECONNREFUSED', last_failed_at: t - 5000 }),
        delivery(a.id, 'pending'),
        delivery(a.id, 'dead', { last_error: 'HTTP 500 after 6 attempts', last_failed_at: t - 1000 }),
        delivery(a.id, 'delivered'),
        delivery(b.id, 'dead', { last_error: 'timed out after 10 s', last_failed_at: t - 2000 }),
        delivery(b.id, 'dead', { last_error: 'HTTP 404', last_failed_at: t - 9000 }),
      ])
      .execute()

    const one = (await w().inject({ method: 'GET', url: `/v1/webhooks/${a.id}`, token })).json()
    assert.deepEqual(one.delivery, { pending: 3, dead: 1, last_error: 'HTTP 500 after 6 attempts', last_failed_at: t - 1000 })
    const list = (await w().inject({ method: 'GET', url: '/v1/webhooks', token })).json()
    const byId = new Map(list.data.map((s: { id: string; delivery: unknown }) => [s.id, s.delivery]))
    assert.deepEqual(byId.get(a.id), one.delivery)
    assert.deepEqual(byId.get(b.id), { pending: 0, dead: 2, last_error: 'timed out after 10 s', last_failed_at: t - 2000 })
  })

  it('deletes a subscription with its deliveries', async () => {
    const sub = (await create(w(), { url: HOOK + '/del', events: ['session.failed'] })).json()
    await w().store.db.insertInto('webhook_deliveries').values([delivery(sub.id, 'pending'), delivery(sub.id, 'dead')]).execute()
    const res = await w().inject({ method: 'DELETE', url: `/v1/webhooks/${sub.id}` })
    assert.equal(res.statusCode, 200)
    assert.deepEqual(res.json(), { object: 'webhook.subscription.deleted', id: sub.id, deleted: true })
    const left = await w().store.db.selectFrom('webhook_deliveries').select('id').where('subscription_id', '=', sub.id).execute()
    assert.equal(left.length, 0)
    assert.equal((await w().inject({ method: 'GET', url: `/v1/webhooks/${sub.id}` })).statusCode, 404)
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/webhooks/${sub.id}` })).statusCode, 404)
    // The same url and set may be subscribed again once the first is gone.
    assert.equal((await create(w(), { url: HOOK + '/del', events: ['session.failed'] })).statusCode, 201)
  })

  it('replays a create under the same Idempotency-Key instead of subscribing twice', async () => {
    const { token } = await w().mint()
    const send = () => w().inject({ method: 'POST', url: '/v1/webhooks', token, headers: { 'idempotency-key': 'k1' }, payload: { url: HOOK, events: ['session.working'] } })
    const first = await send()
    const again = await send()
    assert.equal(first.statusCode, 201)
    assert.equal(again.statusCode, 201)
    assert.equal(again.json().id, first.json().id)
    assert.equal((await w().inject({ method: 'GET', url: '/v1/webhooks', token })).json().data.length, 1)
  })

  describe('listing', () => {
    it('pages newest first with limit, after and has_more', async () => {
      const { token } = await w().mint()
      const ids: string[] = []
      for (const events of [['session.created'], ['session.idle'], ['session.failed']]) {
        ids.push((await create(w(), { url: HOOK, events }, token)).json().id)
        await sleep(3) // distinct created_at, so that newest-first is decided by time and not by id
      }
      const page1 = (await w().inject({ method: 'GET', url: '/v1/webhooks?limit=2', token })).json()
      assert.equal(page1.object, 'list')
      assert.deepEqual(page1.data.map((s: { id: string }) => s.id), [ids[2], ids[1]])
      assert.equal(page1.has_more, true)
      assert.equal(page1.last_id, ids[1])
      const page2 = (await w().inject({ method: 'GET', url: `/v1/webhooks?limit=2&after=${page1.last_id}`, token })).json()
      assert.deepEqual(page2.data.map((s: { id: string }) => s.id), [ids[0]])
      assert.equal(page2.has_more, false)
      const exact = (await w().inject({ method: 'GET', url: '/v1/webhooks?limit=3', token })).json()
      assert.equal(exact.has_more, false)
    })

    it('returns an empty page for a cursor it cannot place', async () => {
      const foreign = (await create(w(), { url: HOOK + '/foreign', events: ['session.created'] })).json()
      const { token } = await w().mint()
      await create(w(), { url: HOOK, events: ['session.created'] }, token)
      for (const after of ['whk_never_issued', foreign.id]) {
        const res = await w().inject({ method: 'GET', url: `/v1/webhooks?after=${after}`, token })
        assert.equal(res.statusCode, 200)
        assert.deepEqual(res.json(), { object: 'list', data: [], has_more: false, last_id: '' })
      }
    })

    it('refuses order, unknown parameters and out-of-range limits', async () => {
      const order = await w().inject({ method: 'GET', url: '/v1/webhooks?order=asc' })
      assert.equal(order.statusCode, 400)
      assert.match(errorOf(order).message, /order/)
      for (const q of ['limit=0', 'limit=101', 'limit=x', 'status=dead']) {
        const res = await w().inject({ method: 'GET', url: `/v1/webhooks?${q}` })
        assert.equal(res.statusCode, 400, q)
        assert.equal(errorOf(res).code, 'invalid_request')
      }
    })
  })

  it("answers another organization's subscription exactly like a missing one", async () => {
    const sub = (await create(w(), { url: HOOK + '/mine', events: ['session.created'] })).json()
    const { token } = await w().mint()
    for (const method of ['GET', 'DELETE'] as const) {
      const theirs = await w().inject({ method, url: `/v1/webhooks/${sub.id}`, token })
      const missing = await w().inject({ method, url: '/v1/webhooks/whk_missing', token })
      assert.equal(theirs.statusCode, 404)
      assert.equal(missing.statusCode, 404)
      assert.equal(errorOf(theirs).code, 'not_found')
      assert.equal(errorOf(theirs).message.replace(sub.id, 'ID'), errorOf(missing).message.replace('whk_missing', 'ID'))
    }
    assert.equal((await w().inject({ method: 'GET', url: `/v1/webhooks/${sub.id}` })).statusCode, 200)
  })

  it('needs webhooks:read to read and webhooks:write to change, naming the scope', async () => {
    const reader = await w().mint(undefined, ['webhooks:read'])
    const writer = await w().mint(undefined, ['webhooks:write'])
    const sub = (await create(w(), { url: HOOK, events: ['session.created'] }, writer.token)).json()
    const post = await create(w(), { url: HOOK, events: ['session.created'] }, reader.token)
    assert.equal(post.statusCode, 403)
    assert.match(errorOf(post).message, /webhooks:write/)
    const del = await w().inject({ method: 'DELETE', url: `/v1/webhooks/${sub.id}`, token: reader.token })
    assert.equal(del.statusCode, 403)
    assert.match(errorOf(del).message, /webhooks:write/)
    for (const url of ['/v1/webhooks', `/v1/webhooks/${sub.id}`]) {
      const res = await w().inject({ method: 'GET', url, token: writer.token })
      assert.equal(res.statusCode, 403)
      assert.equal(errorOf(res).code, 'permission_denied')
      assert.match(errorOf(res).message, /webhooks:read/)
    }
    assert.equal((await w().inject({ method: 'GET', url: '/v1/webhooks', token: reader.token })).statusCode, 200)
  })

  it('describes the routes in the OpenAPI document', async () => {
    const doc = (await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })).json()
    assert.equal(doc.paths['/v1/webhooks'].post.operationId, 'createWebhook')
    assert.equal(doc.paths['/v1/webhooks'].get.operationId, 'listWebhooks')
    assert.equal(doc.paths['/v1/webhooks/{webhook_id}'].get.operationId, 'getWebhook')
    assert.equal(doc.paths['/v1/webhooks/{webhook_id}'].delete.operationId, 'deleteWebhook')
    assert.ok(doc.paths['/v1/webhooks'].post.responses['409'])
  })
})

forEachDialect('webhook subscriptions with WARREN_ALLOW_PRIVATE_WEBHOOKS', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_ALLOW_PRIVATE_WEBHOOKS: '1' } })

  it('accepts loopback and private hosts, still only over https', async () => {
    for (const url of ['https://127.0.0.1:8443/h', 'https://localhost/h', 'https://10.0.0.2/h', 'https://[::1]:9000/h']) {
      assert.equal((await create(w(), { url, events: ['session.created'] })).statusCode, 201, url)
    }
    const plain = await create(w(), { url: 'http://127.0.0.1:8080/h', events: ['session.created'] })
    assert.equal(plain.statusCode, 400)
    assert.match(errorOf(plain).message, /https/)
  })

  it('still refuses the metadata and link-local addresses: "1" means loopback and the private ranges', async () => {
    for (const url of ['https://169.254.169.254/latest', 'https://[fd00:ec2::254]/latest', 'https://100.100.100.200/h', 'https://[fe80::1]/h', 'https://0.0.0.0/h']) {
      const res = await create(w(), { url, events: ['session.created'] })
      assert.equal(res.statusCode, 400, url)
      assert.match(errorOf(res).message, /WARREN_ALLOW_PRIVATE_WEBHOOKS/, url)
    }
  })
})

forEachDialect('webhook subscriptions with WARREN_ALLOW_PRIVATE_WEBHOOKS as CIDRs', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_ALLOW_PRIVATE_WEBHOOKS: '10.0.5.0/24,169.254.169.254/32' } })

  it('accepts the listed ranges and the metadata address only when named, nothing else', async () => {
    for (const url of ['https://10.0.5.7/h', 'https://169.254.169.254/h']) assert.equal((await create(w(), { url, events: ['session.created'] })).statusCode, 201, url)
    for (const url of ['https://10.0.6.7/h', 'https://127.0.0.1/h', 'https://localhost/h', 'https://169.254.170.2/h']) {
      const res = await create(w(), { url, events: ['session.created'] })
      assert.equal(res.statusCode, 400, url)
      assert.match(errorOf(res).message, /is a (private|loopback|link-local) (address|name)/, url)
    }
  })
})
