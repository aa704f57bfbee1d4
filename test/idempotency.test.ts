import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError, listTokenIds } from './expect.ts'

const mintBody = (name: string) => ({ name, scopes: ['sessions:read'], expires_in_days: 7 })
const keyed = (key: string) => ({ 'idempotency-key': key })
const uniq = () => Math.random().toString(36).slice(2)

/**
 * A model provider whose model list answers only when the test says so: a request to the service
 * that asks it is in flight, honestly, for as long as the test wants.
 */
function heldProvider() {
  let seen: () => void = () => {}
  let arrived = new Promise<void>((r) => (seen = r))
  const held: http.ServerResponse[] = []
  let status = 200
  const server = http.createServer((req, res) => {
    held.push(res)
    seen()
  })
  return {
    start: () => new Promise<string>((r) => server.listen(0, '127.0.0.1', () => r(`http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`))),
    /** Resolves once a model-list request is waiting. */
    arrived: () => arrived,
    /** Answers every waiting request (200 with one model, or the given status) and re-arms. */
    release(nextStatus = 200) {
      status = nextStatus
      for (const res of held.splice(0)) {
        res.writeHead(status, { 'content-type': 'application/json' })
        res.end(status === 200 ? JSON.stringify({ object: 'list', data: [{ id: 'held-model', object: 'model' }] }) : '{"error":"boom"}')
      }
      arrived = new Promise<void>((r) => (seen = r))
    },
    stop: () => new Promise<void>((r) => server.close(() => r())),
  }
}

forEachDialect('idempotency', (dialect) => {
  const w = useWarren(dialect)

  it('answers a retry with the first answer, marked idempotent-replayed, acting once', async () => {
    const before = await listTokenIds(w())
    const key = `mint-${uniq()}`
    const first = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload: mintBody('once') })
    assert.equal(first.statusCode, 201, first.body)
    assert.equal(first.headers['idempotent-replayed'], undefined)
    const second = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload: mintBody('once') })
    assert.equal(second.statusCode, 201)
    assert.equal(second.headers['idempotent-replayed'], 'true')
    assert.match(String(second.headers['content-type']), /^application\/json/)
    assert.deepEqual(second.json(), first.json())
    assert.notEqual(second.headers['x-request-id'], first.headers['x-request-id'])
    const after = await listTokenIds(w())
    assert.deepEqual(after.filter((id) => !before.includes(id)), [first.json().id], 'the retry minted another token')
    // Without the key the same request acts again.
    const third = await w().inject({ method: 'POST', url: '/v1/tokens', payload: mintBody('once') })
    assert.notEqual(third.json().id, first.json().id)
  })

  it('replays a DELETE: the retry gets the first 200, not the 404 a second delete would earn', async () => {
    const victim = (await w().inject({ method: 'POST', url: '/v1/tokens', payload: mintBody('victim') })).json()
    const key = `del-${uniq()}`
    const first = await w().inject({ method: 'DELETE', url: `/v1/tokens/${victim.id}`, headers: keyed(key) })
    assert.equal(first.statusCode, 200, first.body)
    const retry = await w().inject({ method: 'DELETE', url: `/v1/tokens/${victim.id}`, headers: keyed(key) })
    assert.equal(retry.statusCode, 200)
    assert.equal(retry.headers['idempotent-replayed'], 'true')
    assert.deepEqual(retry.json(), first.json())
    expectError(await w().inject({ method: 'DELETE', url: `/v1/tokens/${victim.id}` }), 404, 'not_found')
  })

  it('replays a refusal the handler gave, too', async () => {
    const limited = await w().mint(undefined, ['tokens:write'])
    const key = `refused-${uniq()}`
    const payload = { scopes: ['agents:write'], expires_in_days: 7 }
    const first = await w().inject({ method: 'POST', url: '/v1/tokens', token: limited.token, headers: keyed(key), payload })
    const e = expectError(first, 403, 'permission_denied')
    const retry = await w().inject({ method: 'POST', url: '/v1/tokens', token: limited.token, headers: keyed(key), payload })
    assert.equal(retry.statusCode, 403)
    assert.equal(retry.headers['idempotent-replayed'], 'true')
    assert.equal(retry.json().error.message, e.message)
  })

  it('refuses the same key with a different request with 400, acting on nothing', async () => {
    const key = `diff-${uniq()}`
    const first = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload: mintBody('a') })
    assert.equal(first.statusCode, 201)
    const before = await listTokenIds(w())
    const otherBody = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload: mintBody('b') })
    assert.match(expectError(otherBody, 400, 'invalid_request').message, /Idempotency-Key/)
    const otherPath = await w().inject({ method: 'DELETE', url: `/v1/tokens/${first.json().id}`, headers: keyed(key) })
    expectError(otherPath, 400, 'invalid_request')
    assert.deepEqual(await listTokenIds(w()), before, 'a refused request acted')
  })

  it('accepts a key of 255 characters and refuses one of 256 with 400', async () => {
    const ok = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed('k'.repeat(255)), payload: mintBody('long-key') })
    assert.equal(ok.statusCode, 201, ok.body)
    const before = await listTokenIds(w())
    const tooLong = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed('k'.repeat(256)), payload: mintBody('too-long-key') })
    assert.match(expectError(tooLong, 400, 'invalid_request').message, /Idempotency-Key/)
    assert.deepEqual(await listTokenIds(w()), before)
  })

  it('refuses an identical request still in flight with 409 conflict', async () => {
    // The first request's claim, as the service records it while that request runs.
    const key = `inflight-${uniq()}`
    const payload = mintBody('in-flight')
    const tokenId = (await w().inject({ method: 'GET', url: '/v1/health' })).json().token_id
    const fingerprint = createHash('sha256').update(`POST /v1/tokens\n${JSON.stringify(payload)}`).digest('hex')
    await w().store.db.insertInto('idempotency_keys').values({ token_id: tokenId, key, fingerprint, state: 'in_flight', status_code: null, body: null, created_at: Date.now() }).execute()
    const before = await listTokenIds(w())
    const res = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload })
    assert.match(expectError(res, 409, 'conflict').message, /in flight/)
    assert.deepEqual(await listTokenIds(w()), before)
  })

  it('releases a claim abandoned by a process that died mid-request, so the retry acts', async () => {
    const key = `abandoned-${uniq()}`
    const payload = mintBody('abandoned')
    const tokenId = (await w().inject({ method: 'GET', url: '/v1/health' })).json().token_id
    const fingerprint = createHash('sha256').update(`POST /v1/tokens\n${JSON.stringify(payload)}`).digest('hex')
    const sixMinutesAgo = Date.now() - 6 * 60_000
    await w().store.db.insertInto('idempotency_keys').values({ token_id: tokenId, key, fingerprint, state: 'in_flight', status_code: null, body: null, created_at: sixMinutesAgo }).execute()
    const res = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload })
    assert.equal(res.statusCode, 201, res.body)
    assert.equal(res.headers['idempotent-replayed'], undefined)
  })

  it('releases at once a claim in flight whose node is gone (killed, or declared dead after a pause), and keeps one of a live node', async () => {
    const tokenId = (await w().inject({ method: 'GET', url: '/v1/health' })).json().token_id
    const claim = async (name: string, nodeId: string) => {
      const key = `node-${name}-${uniq()}`
      const payload = mintBody(`node-${name}`)
      const fingerprint = createHash('sha256').update(`POST /v1/tokens\n${JSON.stringify(payload)}`).digest('hex')
      await w().store.db.insertInto('idempotency_keys').values({ token_id: tokenId, key, fingerprint, state: 'in_flight', status_code: null, body: null, created_at: Date.now(), node_id: nodeId }).execute()
      return w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload })
    }
    // A node that stopped a moment ago: its request died with it.
    const gone = `node_gone_${uniq()}`
    const now = Date.now()
    await w().store.db.insertInto('nodes').values({ id: gone, host: 'h', pid: 1, url: '', data_dir: '/nonexistent', sandbox_prefix: 'zz', sandbox_subnet: '', uid_base: 0, uid_count: 0, started_at: now, heartbeat_at: now, stopped_at: now, secret: null }).execute()
    const retried = await claim('gone', gone)
    assert.equal(retried.statusCode, 201, retried.body)
    // This very node is live: its request may still answer.
    const live = await claim('live', w().node.id)
    assert.match(expectError(live, 409, 'conflict').message, /in flight/)
  })

  it('keeps the first answer sealed at rest: a secret shown once is not stored in plain text', async () => {
    const key = `sealed-${uniq()}`
    const res = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload: mintBody('sealed') })
    assert.equal(res.statusCode, 201)
    const secret = res.json().token as string
    const row = await w().store.db.selectFrom('idempotency_keys').selectAll().where('key', '=', key).executeTakeFirstOrThrow()
    assert.ok(row.body && !row.body.includes(secret), 'the stored answer must not hold the secret in clear')
    const replay = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload: mintBody('sealed') })
    assert.equal(replay.json().token, secret, 'the replay still returns the first answer')
  })

  it('scopes keys to the token: another token using the same key acts anew', async () => {
    const key = `shared-${uniq()}`
    const other = await w().mint() // another organization, every scope
    const mine = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload: mintBody('scoped') })
    const theirs = await w().inject({ method: 'POST', url: '/v1/tokens', token: other.token, headers: keyed(key), payload: mintBody('scoped') })
    assert.equal(mine.statusCode, 201)
    assert.equal(theirs.statusCode, 201)
    assert.equal(theirs.headers['idempotent-replayed'], undefined)
    assert.notEqual(theirs.json().id, mine.json().id)
    assert.equal(theirs.json().org_id, other.orgId)
    // Even a second token of the same organization acts anew under the same key.
    const org = await w().store.db.selectFrom('orgs').select('name').where('id', '=', w().orgId).executeTakeFirstOrThrow()
    const sibling = await w().mint(org.name)
    const siblings = await w().inject({ method: 'POST', url: '/v1/tokens', token: sibling.token, headers: keyed(key), payload: mintBody('scoped') })
    assert.equal(siblings.statusCode, 201)
    assert.equal(siblings.headers['idempotent-replayed'], undefined)
    assert.notEqual(siblings.json().id, mine.json().id)
    assert.equal(siblings.json().org_id, w().orgId)
  })

  it('forgets a key after 24 hours: the same request then acts anew', async () => {
    const key = `old-${uniq()}`
    const first = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload: mintBody('old') })
    assert.equal(first.statusCode, 201)
    await w().store.db.updateTable('idempotency_keys').set({ created_at: Date.now() - 25 * 3_600_000 }).where('key', '=', key).execute()
    const later = await w().inject({ method: 'POST', url: '/v1/tokens', headers: keyed(key), payload: mintBody('old') })
    assert.equal(later.statusCode, 201)
    assert.equal(later.headers['idempotent-replayed'], undefined)
    assert.notEqual(later.json().id, first.json().id)
  })
})

forEachDialect('idempotency with a slow provider', (dialect) => {
  const w = useWarren(dialect)
  const provider = heldProvider()
  let baseUrl = ''
  before(async () => {
    baseUrl = await provider.start()
  })
  after(async () => {
    provider.release()
    await provider.stop()
  })

  const connect = (key: string, apiKey: string) =>
    w().inject({ method: 'POST', url: '/v1/model-credentials', headers: keyed(key), payload: { provider: 'openai_compatible', base_url: baseUrl, api_key: apiKey } })

  it('refuses an identical request while the first is really in flight, then replays its answer', async () => {
    const key = `held-${uniq()}`
    const first = connect(key, 'sk-held-1')
    await provider.arrived() // the first request is now inside its handler, waiting on the provider
    const dup = await connect(key, 'sk-held-1')
    expectError(dup, 409, 'conflict')
    provider.release()
    const done = await first
    assert.equal(done.statusCode, 201, done.body)
    const retry = await connect(key, 'sk-held-1')
    assert.equal(retry.statusCode, 201)
    assert.equal(retry.headers['idempotent-replayed'], 'true')
    assert.deepEqual(retry.json(), done.json())
    const list = (await w().inject({ method: 'GET', url: '/v1/model-credentials' })).json()
    assert.equal(list.data.filter((c: { id: string }) => c.id === done.json().id).length, 1)
    assert.equal(list.data.length, 1, 'the refused duplicate connected a second time')
  })

  it('releases the key when the first answer is a server-side failure, so a retry acts', async () => {
    const key = `fail-${uniq()}`
    const first = connect(key, 'sk-held-2')
    await provider.arrived()
    provider.release(500)
    const failed = await first
    assert.ok(failed.statusCode >= 500, `expected a 5xx, got ${failed.statusCode} ${failed.body}`)
    const retry = connect(key, 'sk-held-2')
    await provider.arrived()
    provider.release(200)
    const ok = await retry
    assert.equal(ok.statusCode, 201, ok.body)
    assert.equal(ok.headers['idempotent-replayed'], undefined)
  })
})

forEachDialect('idempotency of session creation', (dialect) => {
  const w = useWarren(dialect)
  before(async () => {
    const res = await w().inject({ method: 'POST', url: '/v1/model-credentials', payload: { provider: 'openai', api_key: 'sk-test-1', models: ['gpt-test'] } })
    assert.ok(res.statusCode === 201 || res.statusCode === 200, res.body)
  })

  const sessionIds = async () => (await w().inject({ method: 'GET', url: '/v1/sessions?limit=100' })).json().data.map((s: { id: string }) => s.id) as string[]

  it('returns the same session to a retry and creates only one', async () => {
    const key = `ses-${uniq()}`
    const payload = { title: 'retried', metadata: { attempt: 'any' } }
    const first = await w().inject({ method: 'POST', url: '/v1/sessions', headers: keyed(key), payload })
    assert.equal(first.statusCode, 201, first.body)
    for (let i = 0; i < 3; i++) {
      const retry = await w().inject({ method: 'POST', url: '/v1/sessions', headers: keyed(key), payload })
      assert.equal(retry.statusCode, 201)
      assert.equal(retry.headers['idempotent-replayed'], 'true')
      assert.equal(retry.json().id, first.json().id)
      assert.deepEqual(retry.json(), first.json())
    }
    assert.deepEqual(await sessionIds(), [first.json().id])
    // A different body under the key is refused and creates nothing.
    const other = await w().inject({ method: 'POST', url: '/v1/sessions', headers: keyed(key), payload: { title: 'other' } })
    expectError(other, 400, 'invalid_request')
    assert.deepEqual(await sessionIds(), [first.json().id])
    // A new key creates a new session.
    const fresh = await w().inject({ method: 'POST', url: '/v1/sessions', headers: keyed(`ses-${uniq()}`), payload })
    assert.equal(fresh.statusCode, 201)
    assert.notEqual(fresh.json().id, first.json().id)
    // DELETE with a key: the retry is the first answer, not a 404.
    const delKey = `ses-del-${uniq()}`
    const del = await w().inject({ method: 'DELETE', url: `/v1/sessions/${fresh.json().id}`, headers: keyed(delKey) })
    assert.equal(del.statusCode, 200, del.body)
    const delAgain = await w().inject({ method: 'DELETE', url: `/v1/sessions/${fresh.json().id}`, headers: keyed(delKey) })
    assert.equal(delAgain.statusCode, 200)
    assert.deepEqual(delAgain.json(), del.json())
  })
})
