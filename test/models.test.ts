import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import type { LightMyRequestResponse } from 'fastify'
import { errorOf, forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { getCredential, getDefaultCredential, findCredentialForModel } from '../src/models/models.store.ts'
import { ModelConnections } from '../src/runner/model-connections.ts'
import { providerFetch } from '../src/runner/provider-fetch.ts'
import { secretBox } from '../src/shared/secret-box.ts'
import { randomText } from '../src/shared/ids.ts'
import { listProviderModels } from '../src/models/list-provider-models.ts'
import type { ApiError } from '../src/errors.ts'
import { setTimeout as sleep } from 'node:timers/promises'

type Org = { token: string; orgId: string }
type Call = { method: 'GET' | 'POST' | 'DELETE'; url: string; payload?: unknown; token?: string; headers?: Record<string, string> }

const key = () => `sk-${randomText(32)}`

forEachDialect('model connections', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_RATE_GENERAL_PER_MIN: '100000' } })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['gpt-a', 'gpt-b'] })
  })
  after(() => fake.close())

  /** Each test works in its own organization: defaults and the limit are per organization. */
  const newOrg = async (): Promise<Org> => {
    const m = await w().mint()
    return { token: m.token, orgId: m.orgId }
  }
  const call = (c: Call) => w().inject({ method: c.method, url: c.url, payload: c.payload as never, token: c.token, headers: c.headers })
  const connect = (org: Org, payload: Record<string, unknown>) => call({ method: 'POST', url: '/v1/model-credentials', token: org.token, payload })
  const connectExplicit = async (org: Org, extra: Record<string, unknown> = {}) => {
    const res = await connect(org, { provider: 'openai', api_key: key(), models: ['gpt-x'], ...extra })
    assert.equal(res.statusCode, 201, res.body)
    return res.json()
  }
  const list = async (org: Org, query = '') => {
    const res = await call({ method: 'GET', url: `/v1/model-credentials${query}`, token: org.token })
    assert.equal(res.statusCode, 200, res.body)
    return res.json()
  }

  it('asks the provider for its models on the OpenAI wire', async () => {
    const org = await newOrg()
    const before = fake.requests.length
    const res = await connect(org, { provider: 'openai_compatible', base_url: `${fake.url}/`, api_key: fake.key, name: 'local' })
    assert.equal(res.statusCode, 201, res.body)
    const c = res.json()
    assert.equal(c.object, 'model_credential')
    assert.match(c.id, /^mc_/)
    assert.deepEqual(c.models, ['gpt-a', 'gpt-b'])
    assert.equal(c.base_url, fake.url, 'the trailing slash is dropped')
    assert.equal(c.provider, 'openai_compatible')
    assert.equal(c.name, 'local')
    assert.equal(c.default, true)
    assert.equal(typeof c.created_at, 'number')
    assert.deepEqual(Object.keys(c).sort(), ['base_url', 'created_at', 'default', 'id', 'key_hint', 'models', 'name', 'object', 'provider'])
    const got = fake.requests.slice(before)
    assert.equal(got.length, 1)
    assert.equal(got[0]!.method, 'GET')
    assert.equal(got[0]!.path, '/v1/models')
    assert.equal(got[0]!.headers.authorization, `Bearer ${fake.key}`)
    assert.equal(got[0]!.headers['x-api-key'], undefined)
  })

  it('asks the provider for its models on the Anthropic wire', async () => {
    const org = await newOrg()
    const before = fake.requests.length
    const res = await connect(org, { provider: 'anthropic', base_url: fake.url, api_key: fake.key })
    assert.equal(res.statusCode, 201, res.body)
    assert.deepEqual(res.json().models, ['gpt-a', 'gpt-b'])
    assert.equal(res.json().name, 'anthropic')
    const got = fake.requests.slice(before)
    assert.equal(got.length, 1)
    assert.equal(got[0]!.path, '/v1/models')
    assert.equal(got[0]!.headers['x-api-key'], fake.key)
    assert.equal(got[0]!.headers['anthropic-version'], '2023-06-01')
    assert.equal(got[0]!.headers.authorization, undefined)
  })

  it('fills in the provider’s own address', async () => {
    const org = await newOrg()
    const openai = await connectExplicit(org)
    assert.equal(openai.base_url, 'https://api.openai.com/v1')
    const anthropic = await connectExplicit(org, { provider: 'anthropic' })
    assert.equal(anthropic.base_url, 'https://api.anthropic.com/v1')
  })

  it('refuses a key the provider refuses with 400 provider_unauthorized, and stores nothing', async () => {
    const org = await newOrg()
    for (const provider of ['openai', 'anthropic']) {
      const res = await connect(org, { provider, base_url: fake.url, api_key: 'sk-wrong-key-0000000000' })
      assert.equal(res.statusCode, 400, res.body)
      assert.equal(errorOf(res).code, 'provider_unauthorized')
      assert.match(errorOf(res).message, /401/)
      assert.doesNotMatch(res.body, /sk-wrong-key/)
    }
    assert.deepEqual((await list(org)).data, [])
  })

  it('reports a provider that fails or cannot be reached as provider_error, suggesting models', async () => {
    const org = await newOrg()
    fake.override = () => ({ status: 500, body: { error: { message: 'boom' } } })
    try {
      const res = await connect(org, { provider: 'openai', base_url: fake.url, api_key: fake.key })
      assert.equal(res.statusCode, 502, res.body)
      assert.equal(errorOf(res).code, 'provider_error')
      assert.match(errorOf(res).message, /HTTP 500/)
      assert.match(errorOf(res).message, /"models"/)
    } finally {
      fake.override = null
    }
    fake.override = () => ({ status: 200, body: { nothing: 'here' } })
    try {
      const res = await connect(org, { provider: 'openai', base_url: fake.url, api_key: fake.key })
      assert.equal(errorOf(res).code, 'provider_error')
    } finally {
      fake.override = null
    }
    const gone = await startModelServer()
    const goneUrl = gone.url
    await gone.close()
    const res = await connect(org, { provider: 'openai_compatible', base_url: goneUrl, api_key: gone.key })
    assert.equal(res.statusCode, 502, res.body)
    assert.equal(errorOf(res).code, 'provider_error')
    assert.match(errorOf(res).message, /Could not reach/)
    assert.deepEqual((await list(org)).data, [])
  })

  it('gives up on a provider that does not answer in time', async () => {
    fake.override = async () => {
      await sleep(1000)
      return { status: 200, body: fake.modelList('openai') }
    }
    try {
      // The route's bound is 10 s; the function takes a shorter one so the test stays quick.
      await assert.rejects(listProviderModels('openai', fake.url, fake.key, ['127.0.0.1/32'], 100), (err: ApiError) => {
        assert.equal(err.code, 'provider_error')
        assert.match(err.message, /no answer within/)
        return true
      })
    } finally {
      fake.override = null
    }
  })

  it('takes models as given without asking the provider', async () => {
    const org = await newOrg()
    const before = fake.requests.length
    const res = await connect(org, { provider: 'openai_compatible', base_url: fake.url, api_key: 'sk-anything-at-all', models: ['m-1', 'm-2'] })
    assert.equal(res.statusCode, 201, res.body)
    assert.deepEqual(res.json().models, ['m-1', 'm-2'])
    assert.equal(fake.requests.length, before, 'the provider got no request')
  })

  it('needs base_url for openai_compatible and validates the body', async () => {
    const org = await newOrg()
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ provider: 'openai_compatible', api_key: key(), models: ['m'] }, /base_url/],
      [{ provider: 'openai', api_key: key(), models: ['m'], bogus: 1 }, /"bogus"/],
      [{ provider: 'other', api_key: key(), models: ['m'] }, /provider/],
      [{ provider: 'openai', models: ['m'] }, /api_key/],
      [{ provider: 'openai', api_key: key(), models: [] }, /models/],
      [{ provider: 'openai', api_key: key(), base_url: 'ftp://x', models: ['m'] }, /base_url/],
    ]
    for (const [payload, message] of cases) {
      const res = await connect(org, payload)
      assert.equal(res.statusCode, 400, `${JSON.stringify(payload)} → ${res.body}`)
      assert.equal(errorOf(res).code, 'invalid_request')
      assert.match(errorOf(res).message, message)
    }
  })

  it('makes the first connection the default, and default:true moves it', async () => {
    const org = await newOrg()
    const first = await connectExplicit(org, { default: false })
    assert.equal(first.default, true, 'the first is the default whatever the body says')
    const second = await connectExplicit(org)
    assert.equal(second.default, false)
    const third = await connectExplicit(org, { default: true })
    assert.equal(third.default, true)
    const all = (await list(org)).data as { id: string; default: boolean }[]
    assert.deepEqual(all.filter((c) => c.default).map((c) => c.id), [third.id])
    assert.equal((await getDefaultCredential(w().store.db, org.orgId))?.id, third.id)
  })

  it('returns the existing connection with 200 when the same key is connected again', async () => {
    const org = await newOrg()
    const k = key()
    const first = await connect(org, { provider: 'openai', api_key: k, models: ['gpt-x'] })
    assert.equal(first.statusCode, 201)
    const other = await connectExplicit(org)
    const before = fake.requests.length
    const again = await connect(org, { provider: 'openai', api_key: k })
    assert.equal(again.statusCode, 200, again.body)
    assert.deepEqual(again.json(), first.json())
    assert.equal(fake.requests.length, before, 'nothing asked of the provider')
    // A different address is a different connection, and default:true on a re-connect is honoured.
    const elsewhere = await connect(org, { provider: 'openai', api_key: k, base_url: 'https://proxy.example/v1', models: ['gpt-x'] })
    assert.equal(elsewhere.statusCode, 201)
    const promote = await connect(org, { provider: 'openai', api_key: k, default: true })
    assert.equal(promote.statusCode, 200)
    assert.equal(promote.json().default, true)
    assert.equal((await list(org)).data.length, 3)
    assert.equal((await call({ method: 'GET', url: `/v1/model-credentials/${other.id}`, token: org.token })).json().default, false)
  })

  it('allows 25 connections an organization; re-connecting does not count', async () => {
    const org = await newOrg()
    const keys = Array.from({ length: 25 }, key)
    for (const k of keys) assert.equal((await connect(org, { provider: 'openai', api_key: k, models: ['m'] })).statusCode, 201)
    const again = await connect(org, { provider: 'openai', api_key: keys[7]!, models: ['m'] })
    assert.equal(again.statusCode, 200, again.body)
    const over = await connect(org, { provider: 'openai', api_key: key(), models: ['m'] })
    assert.equal(over.statusCode, 400)
    assert.equal(errorOf(over).code, 'invalid_request')
    assert.match(errorOf(over).message, /25/)
    const before = fake.requests.length
    const overAsking = await connect(org, { provider: 'openai_compatible', base_url: fake.url, api_key: fake.key })
    assert.equal(overAsking.statusCode, 400)
    assert.equal(fake.requests.length, before, 'the limit is checked before the provider is asked')
    assert.equal((await list(org, '?limit=100')).data.length, 25)
  })

  it('never returns the key, keeps it sealed, and hints at it', async () => {
    const org = await newOrg()
    const secret = 'sk-abcdefghijklmnopqrstuvwxyz9876'
    const bodies: LightMyRequestResponse[] = []
    const created = await connect(org, { provider: 'openai_compatible', base_url: `${fake.url}`, api_key: secret, models: ['m'] })
    bodies.push(created)
    const id = created.json().id
    assert.equal(created.json().key_hint, 'sk-…9876')
    bodies.push(await connect(org, { provider: 'openai_compatible', base_url: fake.url, api_key: secret }))
    bodies.push(await call({ method: 'GET', url: '/v1/model-credentials', token: org.token }))
    bodies.push(await call({ method: 'GET', url: `/v1/model-credentials/${id}`, token: org.token }))
    bodies.push(await call({ method: 'DELETE', url: `/v1/model-credentials/${id}`, token: org.token }))
    for (const b of bodies) {
      assert.ok(b.statusCode < 300, b.body)
      assert.ok(!b.body.includes(secret.slice(3, 20)), `key leaked in ${b.body}`)
    }
    const kept = await connect(org, { provider: 'openai', api_key: secret, models: ['m'] })
    const row = await w().store.db.selectFrom('model_credentials').selectAll().where('id', '=', kept.json().id).executeTakeFirstOrThrow()
    assert.ok(!row.api_key_enc.includes(secret), 'stored sealed')
    // The harness seals with a fixed 32-byte key of sevens.
    const connections = new ModelConnections(w().store.db, secretBox(Buffer.alloc(32, 7)), providerFetch(['127.0.0.1/32']))
    assert.equal((await connections.open(org.orgId, kept.json().id, 'm'))?.key, secret)
    assert.equal(await connections.open('org_other', kept.json().id, 'm'), null)
  })

  it('a driver keeps the opened key and model between steps, yet sees a resealed key and a deleted connection at once', async () => {
    const org = await newOrg()
    const box = secretBox(Buffer.alloc(32, 7))
    const id = (await connect(org, { provider: 'openai', api_key: 'sk-first-key-0123456789', models: ['m'] })).json().id
    const connections = new ModelConnections(w().store.db, box, providerFetch(['127.0.0.1/32']))
    const first = await connections.open(org.orgId, id, 'm')
    const again = await connections.open(org.orgId, id, 'm')
    assert.equal(again?.key, 'sk-first-key-0123456789')
    assert.equal(again?.model, first?.model, 'the same model object while nothing changed')
    assert.notEqual((await connections.open(org.orgId, id, 'other'))?.model, first?.model, 'one model per name')
    // A master key rotation reseals the row: what the row says now is what is used.
    await w().store.db.updateTable('model_credentials').set({ api_key_enc: box.seal('sk-second-key-0123456789') }).where('id', '=', id).execute()
    const resealed = await connections.open(org.orgId, id, 'm')
    assert.equal(resealed?.key, 'sk-second-key-0123456789')
    assert.notEqual(resealed?.model, first?.model)
    assert.equal((await call({ method: 'DELETE', url: `/v1/model-credentials/${id}`, token: org.token })).statusCode, 200)
    assert.equal(await connections.open(org.orgId, id, 'm'), null)
  })

  it('finds the connection for a model: the default when it lists it, else the oldest that does', async () => {
    const org = await newOrg()
    const a = await connectExplicit(org, { models: ['shared', 'only-a'] })
    const b = await connectExplicit(org, { models: ['shared', 'only-b'] })
    const c = await connectExplicit(org, { models: ['only-b'] })
    const db = w().store.db
    assert.equal((await findCredentialForModel(db, org.orgId, 'shared'))?.id, a.id)
    assert.equal((await findCredentialForModel(db, org.orgId, 'only-b'))?.id, b.id)
    assert.equal(await findCredentialForModel(db, org.orgId, 'nope'), null)
    assert.notEqual((await findCredentialForModel(db, org.orgId, 'only-b'))?.id, c.id)
    const d = await connectExplicit(org, { models: ['shared'], default: true })
    assert.equal((await findCredentialForModel(db, org.orgId, 'shared'))?.id, d.id)
    assert.equal((await getDefaultCredential(db, org.orgId))?.id, d.id)
    const record = await getCredential(db, org.orgId, a.id)
    assert.deepEqual(record, { id: a.id, orgId: org.orgId, provider: 'openai', baseUrl: 'https://api.openai.com/v1', name: 'openai', models: ['shared', 'only-a'], isDefault: false, createdAt: a.created_at })
  })

  /** A session row as the sessions domain writes it, reduced to what a connection move touches. */
  const insertSession = async (org: Org, credentialId: string | null, deleted = false) => {
    const id = `ses_${randomText(24)}`
    await w()
      .store.db.insertInto('sessions')
      .values({
        ...{ id, org_id: org.orgId, status: 'idle', created_at: 1, updated_at: 1, title: '', source: 'api', created_by_token: 'tok_x', metadata: '{}' },
        agent: JSON.stringify({ id: 'agt_x', model: 'gpt-x', model_credential_id: credentialId, approval_mode: 'auto', instructions: '', permission_rules: [], tools: null }),
        ...{ model_credential_id: credentialId, environment: '{}', preview: '{}', input: null, deleted_at: deleted ? 2 : null },
      })
      .execute()
    return id
  }
  const sessionCredential = async (id: string) => {
    const row = await w().store.db.selectFrom('sessions').select(['model_credential_id', 'agent', 'updated_at']).where('id', '=', id).executeTakeFirstOrThrow()
    return { column: row.model_credential_id, inAgent: JSON.parse(row.agent).model_credential_id, updatedAt: Number(row.updated_at) }
  }

  it('moves the sessions of a deleted connection to the default, or leaves them with none', async () => {
    const org = await newOrg()
    const a = await connectExplicit(org)
    const b = await connectExplicit(org)
    const c = await connectExplicit(org)
    const onA = [await insertSession(org, a.id), await insertSession(org, a.id)]
    const deletedOnA = await insertSession(org, a.id, true)
    const onB = await insertSession(org, b.id)

    // Removing the default: the oldest remaining connection takes over and the sessions follow.
    const delA = await call({ method: 'DELETE', url: `/v1/model-credentials/${a.id}`, token: org.token })
    assert.equal(delA.statusCode, 200, delA.body)
    assert.deepEqual(delA.json(), { object: 'model_credential.deleted', id: a.id, deleted: true, sessions_moved: 2, moved_to: b.id })
    for (const s of onA) {
      const now = await sessionCredential(s)
      assert.equal(now.column, b.id)
      assert.equal(now.inAgent, b.id)
      assert.ok(now.updatedAt > 1)
    }
    assert.equal((await sessionCredential(deletedOnA)).column, a.id, 'deleted sessions are left alone')
    assert.equal((await call({ method: 'GET', url: `/v1/model-credentials/${b.id}`, token: org.token })).json().default, true)

    // Removing a non-default connection: its sessions move to the default.
    const onC = await insertSession(org, c.id)
    const delC = await call({ method: 'DELETE', url: `/v1/model-credentials/${c.id}`, token: org.token })
    assert.deepEqual(delC.json(), { object: 'model_credential.deleted', id: c.id, deleted: true, sessions_moved: 1, moved_to: b.id })
    assert.equal((await sessionCredential(onC)).column, b.id)

    // Removing the last one: nothing to move to.
    const delB = await call({ method: 'DELETE', url: `/v1/model-credentials/${b.id}`, token: org.token })
    assert.deepEqual(delB.json(), { object: 'model_credential.deleted', id: b.id, deleted: true, sessions_moved: 4, moved_to: null })
    for (const s of [...onA, onB, onC]) assert.deepEqual({ ...(await sessionCredential(s)), updatedAt: 0 }, { column: null, inAgent: null, updatedAt: 0 })

    const again = await call({ method: 'DELETE', url: `/v1/model-credentials/${b.id}`, token: org.token })
    assert.equal(again.statusCode, 404)
    assert.deepEqual((await list(org)).data, [])
    const next = await connectExplicit(org)
    assert.equal(next.default, true, 'a new first connection is the default again')
  })

  it('refuses a query parameter on delete', async () => {
    const org = await newOrg()
    const a = await connectExplicit(org)
    const res = await call({ method: 'DELETE', url: `/v1/model-credentials/${a.id}?force=true`, token: org.token })
    assert.equal(res.statusCode, 400)
    assert.match(errorOf(res).message, /"force"/)
  })

  it('answers another organization’s connection exactly as a missing one', async () => {
    const mine = await newOrg()
    const theirs = await newOrg()
    const theirC = await connectExplicit(theirs)
    const missing = 'mc_doesnotexist0000000000'
    for (const method of ['GET', 'DELETE'] as const) {
      const other = await call({ method, url: `/v1/model-credentials/${theirC.id}`, token: mine.token })
      const none = await call({ method, url: `/v1/model-credentials/${missing}`, token: mine.token })
      assert.equal(other.statusCode, 404)
      assert.equal(none.statusCode, 404)
      assert.equal(errorOf(other).code, 'not_found')
      assert.equal(errorOf(other).message, errorOf(none).message.replace(missing, theirC.id))
    }
    assert.equal((await call({ method: 'GET', url: `/v1/model-credentials/${theirC.id}`, token: theirs.token })).statusCode, 200)
    assert.deepEqual((await list(mine)).data, [])
  })

  it('pages newest first with limit and after', async () => {
    const org = await newOrg()
    const made = []
    for (let i = 0; i < 3; i++) made.push(await connectExplicit(org))
    const ids = made.map((c) => c.id).reverse()
    const p1 = await list(org, '?limit=2')
    assert.equal(p1.object, 'list')
    assert.deepEqual(p1.data.map((c: { id: string }) => c.id), ids.slice(0, 2))
    assert.equal(p1.has_more, true)
    assert.equal(p1.last_id, ids[1])
    const p2 = await list(org, `?limit=2&after=${p1.last_id}`)
    assert.deepEqual(p2.data.map((c: { id: string }) => c.id), ids.slice(2))
    assert.equal(p2.has_more, false)
    const other = await connectExplicit(await newOrg())
    for (const after of ['mc_never', other.id]) {
      assert.deepEqual(await list(org, `?after=${after}`), { object: 'list', data: [], has_more: false, last_id: '' })
    }
    for (const q of ['?limit=0', '?limit=101', '?order=asc', '?bogus=1']) {
      const res = await call({ method: 'GET', url: `/v1/model-credentials${q}`, token: org.token })
      assert.equal(res.statusCode, 400, q)
      assert.equal(errorOf(res).code, 'invalid_request')
    }
    assert.match(errorOf(await call({ method: 'GET', url: '/v1/model-credentials?order=asc', token: org.token })).message, /"order"/)
  })

  it('needs models:read to read and models:write to change', async () => {
    const org = await newOrg()
    const c = await connectExplicit(org)
    const m = await w().mint(undefined, ['models:read'])
    const readOnly = { token: m.token }
    const denied = await call({ method: 'POST', url: '/v1/model-credentials', payload: { provider: 'openai', api_key: key(), models: ['m'] }, ...readOnly })
    assert.equal(denied.statusCode, 403)
    assert.equal(errorOf(denied).code, 'permission_denied')
    assert.match(errorOf(denied).message, /models:write/)
    const del = await call({ method: 'DELETE', url: `/v1/model-credentials/${c.id}`, ...readOnly })
    assert.equal(del.statusCode, 403)
    assert.equal((await call({ method: 'GET', url: '/v1/model-credentials', ...readOnly })).statusCode, 200)
    const none = await w().mint(undefined, ['sessions:read'])
    const res = await call({ method: 'GET', url: '/v1/model-credentials', token: none.token })
    assert.equal(res.statusCode, 403)
    assert.match(errorOf(res).message, /models:read/)
  })

  it('replays a connect sent again under the same Idempotency-Key', async () => {
    const org = await newOrg()
    const payload = { provider: 'openai', api_key: key(), models: ['m'] }
    const headers = { 'idempotency-key': `k-${randomText(8)}` }
    const first = await call({ method: 'POST', url: '/v1/model-credentials', token: org.token, payload, headers })
    const second = await call({ method: 'POST', url: '/v1/model-credentials', token: org.token, payload, headers })
    assert.equal(first.statusCode, 201)
    assert.equal(second.statusCode, 201)
    assert.equal(second.headers['idempotent-replayed'], 'true')
    assert.deepEqual(second.json(), first.json())
  })

  it('describes every route in the OpenAPI document', async () => {
    const doc = (await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })).json()
    const ops = ['/v1/model-credentials', '/v1/model-credentials/{credential_id}'].flatMap((p) =>
      Object.entries(doc.paths[p] ?? {}).map(([method, op]) => [method, (op as { operationId: string }).operationId]),
    )
    assert.deepEqual(ops.sort(), [['delete', 'deleteModelCredential'], ['get', 'getModelCredential'], ['get', 'listModelCredentials'], ['post', 'createModelCredential']].sort())
  })
})
