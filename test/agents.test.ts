import { it } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { errorOf, forEachDialect, useWarren } from './harness.ts'
import { openToolEntry } from '../src/tools/tool-entries.ts'
import { getAgent } from '../src/agents/agents.store.ts'
import { randomText } from '../src/shared/ids.ts'

type Org = { token: string; orgId: string }

// What this deployment offers with no search backend (WARREN_SEARCH_URL unset): no web_search, no image_search.
const NETWORK_TOOLS = ['browse', 'browser_act', 'screenshot', 'web_fetch']
const MCP_SECRET = 'Bearer mcp-secret-value-123'

forEachDialect('stored agents', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_RATE_GENERAL_PER_MIN: '100000' } })

  const newOrg = async (): Promise<Org> => {
    const m = await w().mint()
    return { token: m.token, orgId: m.orgId }
  }
  const connect = async (org: Org, models: string[], extra: Record<string, unknown> = {}): Promise<string> => {
    const res = await w().inject({ method: 'POST', url: '/v1/model-credentials', token: org.token, payload: { provider: 'openai', api_key: `sk-${randomText(30)}`, models, ...extra } })
    assert.equal(res.statusCode, 201, res.body)
    return res.json().id
  }
  const post = (org: Org, url: string, payload: unknown) => w().inject({ method: 'POST', url, token: org.token, payload: payload as never })
  const get = (org: Org, url: string) => w().inject({ method: 'GET', url, token: org.token })
  const create = async (org: Org, payload: Record<string, unknown>) => {
    const res = await post(org, '/v1/agents', payload)
    assert.equal(res.statusCode, 201, res.body)
    return res.json()
  }

  it('stores an agent with its defaults, on the connection that lists its model', async () => {
    const org = await newOrg()
    const mc = await connect(org, ['gpt-x'])
    const a = await create(org, { name: 'reviewer', model: 'gpt-x' })
    assert.equal(a.object, 'agent')
    assert.match(a.id, /^agt_/)
    assert.equal(a.name, 'reviewer')
    assert.equal(a.model, 'gpt-x')
    assert.equal(a.model_credential_id, mc)
    assert.equal(a.instructions, '')
    assert.deepEqual(a.text, {})
    assert.deepEqual(a.tools.map((t: { type: string }) => t.type).sort(), NETWORK_TOOLS, 'no tools given: the default set')
    assert.equal(typeof a.created_at, 'number')
    assert.deepEqual(Object.keys(a).sort(), ['created_at', 'id', 'instructions', 'model', 'model_credential_id', 'name', 'object', 'text', 'tools'])
    assert.deepEqual((await get(org, `/v1/agents/${a.id}`)).json(), a)
    assert.equal((await getAgent(w().store.db, org.orgId, a.id))?.tools, null, 'stored as "default set", not as a copy of it')
  })

  it('picks the default connection when it lists the model, else the oldest that does', async () => {
    const org = await newOrg()
    const a = await connect(org, ['shared', 'only-a'])
    const b = await connect(org, ['shared', 'only-b'])
    const c = await connect(org, ['only-b'])
    assert.equal((await create(org, { name: 'n', model: 'shared' })).model_credential_id, a)
    assert.equal((await create(org, { name: 'n', model: 'only-b' })).model_credential_id, b)
    assert.equal((await create(org, { name: 'n', model: 'only-b', model_credential_id: c })).model_credential_id, c)
    const d = await connect(org, ['shared'], { default: true })
    assert.equal((await create(org, { name: 'n', model: 'shared' })).model_credential_id, d)
  })

  it('refuses a model no connection lists, and a connection that is not the organization’s', async () => {
    const org = await newOrg()
    const mine = await connect(org, ['gpt-x'])
    const theirs = await connect(await newOrg(), ['gpt-x'])
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ name: 'n', model: 'nope-model' }, /"nope-model"/],
      [{ name: 'n', model: 'gpt-x', model_credential_id: theirs }, new RegExp(theirs)],
      [{ name: 'n', model: 'gpt-x', model_credential_id: 'mc_missing' }, /mc_missing/],
      [{ name: 'n', model: 'other', model_credential_id: mine }, /"other"/],
    ]
    for (const [payload, message] of cases) {
      const res = await post(org, '/v1/agents', payload)
      assert.equal(res.statusCode, 400, res.body)
      assert.equal(errorOf(res).code, 'invalid_request')
      assert.match(errorOf(res).message, message)
    }
    assert.deepEqual((await get(org, '/v1/agents')).json().data, [])
  })

  it('validates the body and names what it refuses', async () => {
    const org = await newOrg()
    await connect(org, ['gpt-x'])
    const cases: [unknown, RegExp][] = [
      [{ name: 'n', model: 'gpt-x', bogus: 1 }, /"bogus"/],
      [{ model: 'gpt-x' }, /"name"/],
      [{ name: 'n' }, /"model"/],
      [{ name: 'n', model: 'gpt-x', text: 'plain' }, /text/],
      [{ name: 'n', model: 'gpt-x', tools: [{ type: 'mcp', name: 'gh', url: 'https://mcp.example', bogus: true }] }, /tools\[0\]\.bogus.*accepts type, name, url, command/],
      [{ name: 'n', model: 'gpt-x', tools: [{ type: 'web_search', name: 'x' }] }, /accepts type\./],
      [{ name: 'n', model: 'gpt-x', tools: [{ type: 'teleport' }] }, /type.*must be one of/],
      [{ name: 'n', model: 'gpt-x', tools: [{ type: 'mcp', name: 'gh' }] }, /exactly one of "url"/],
      [{ name: 'n', model: 'gpt-x', tools: [{ type: 'web_search' }, { type: 'web_search' }] }, /repeats/],
    ]
    for (const [payload, message] of cases) {
      const res = await post(org, '/v1/agents', payload)
      assert.equal(res.statusCode, 400, `${JSON.stringify(payload)} → ${res.body}`)
      assert.equal(errorOf(res).code, 'invalid_request')
      assert.match(errorOf(res).message, message)
    }
  })

  it('keeps tool credentials but never returns them', async () => {
    const org = await newOrg()
    await connect(org, ['gpt-x'])
    const tools = [
      { type: 'mcp', name: 'gh', url: 'https://mcp.example/x', authorization: MCP_SECRET, headers: { 'X-Team': 'team-secret-456' }, required: false },
      { type: 'function', name: 'lookup', description: 'Looks up', parameters: { type: 'object' } },
      { type: 'web_fetch' },
    ]
    const res = await post(org, '/v1/agents', { name: 'n', model: 'gpt-x', tools, instructions: 'Be brief.', text: { verbosity: 'low' } })
    assert.equal(res.statusCode, 201, res.body)
    const a = res.json()
    assert.deepEqual(a.tools[0], { type: 'mcp', name: 'gh', url: 'https://mcp.example/x', required: false, redacted: ['authorization', 'headers.X-Team'] })
    assert.deepEqual(a.tools.slice(1), tools.slice(1))
    assert.equal(a.instructions, 'Be brief.')
    assert.deepEqual(a.text, { verbosity: 'low' })
    const bodies = [res.body, (await get(org, `/v1/agents/${a.id}`)).body, (await get(org, '/v1/agents')).body, (await post(org, `/v1/agents/${a.id}`, { name: 'renamed' })).body]
    for (const b of bodies) {
      assert.ok(!b.includes('mcp-secret-value') && !b.includes('team-secret'), `secret leaked in ${b}`)
    }
    // Stored sealed: nothing secret in plain text, and the key gives the credentials back whole.
    const stored = await getAgent(w().store.db, org.orgId, a.id)
    assert.ok(!JSON.stringify(stored).includes('mcp-secret-value') && !JSON.stringify(stored).includes('team-secret'))
    assert.deepEqual(stored!.tools!.map((t) => openToolEntry(w().box, t)), tools)
  })

  it('updates only the fields given, re-deciding the connection when the model changes', async () => {
    const org = await newOrg()
    const a1 = await connect(org, ['gpt-x', 'gpt-y'])
    const b1 = await connect(org, ['gpt-z', 'gpt-y'])
    const c1 = await connect(org, ['gpt-q'])
    const a = await create(org, { name: 'n', model: 'gpt-x', instructions: 'one', tools: [{ type: 'web_search' }] })
    const renamed = await post(org, `/v1/agents/${a.id}`, { name: 'm' })
    assert.equal(renamed.statusCode, 200, renamed.body)
    assert.deepEqual(renamed.json(), { ...a, name: 'm' })

    const moved = (await post(org, `/v1/agents/${a.id}`, { model: 'gpt-z' })).json()
    assert.equal(moved.model, 'gpt-z')
    assert.equal(moved.model_credential_id, b1)
    const pinned = (await post(org, `/v1/agents/${a.id}`, { model: 'gpt-y', model_credential_id: a1 })).json()
    assert.equal(pinned.model_credential_id, a1)
    const kept = (await post(org, `/v1/agents/${a.id}`, { model: 'gpt-y' })).json()
    assert.equal(kept.model_credential_id, a1, 'the current connection still lists the model, so it stays')

    const replaced = (await post(org, `/v1/agents/${a.id}`, { tools: [], text: { a: 1 }, instructions: 'two' })).json()
    assert.deepEqual(replaced.tools, [], 'an empty array means none')
    assert.deepEqual(replaced.text, { a: 1 })
    assert.equal(replaced.instructions, 'two')
    assert.equal(replaced.created_at, a.created_at)

    for (const [payload, message] of [
      [{ model: 'nope' }, /"nope"/],
      [{ model_credential_id: c1 }, /"gpt-y"/],
      [{ bogus: 1 }, /"bogus"/],
    ] as const) {
      const res = await post(org, `/v1/agents/${a.id}`, payload)
      assert.equal(res.statusCode, 400, res.body)
      assert.match(errorOf(res).message, message)
    }
    assert.deepEqual((await get(org, `/v1/agents/${a.id}`)).json(), replaced, 'a refused update changes nothing')
  })

  it('deletes an agent, and answers another organization’s agent as a missing one', async () => {
    const org = await newOrg()
    const other = await newOrg()
    await connect(org, ['gpt-x'])
    await connect(other, ['gpt-x'])
    const a = await create(org, { name: 'n', model: 'gpt-x' })
    const theirs = await create(other, { name: 'n', model: 'gpt-x' })
    const missing = 'agt_missing000000000000000'
    const calls = [
      (id: string) => get(org, `/v1/agents/${id}`),
      (id: string) => post(org, `/v1/agents/${id}`, { name: 'x' }),
      (id: string) => w().inject({ method: 'DELETE', url: `/v1/agents/${id}`, token: org.token }),
    ]
    for (const c of calls) {
      const r1 = await c(theirs.id)
      const r2 = await c(missing)
      assert.equal(r1.statusCode, 404)
      assert.equal(errorOf(r1).code, 'not_found')
      assert.equal(errorOf(r1).message, errorOf(r2).message.replace(missing, theirs.id))
    }
    assert.equal((await get(other, `/v1/agents/${theirs.id}`)).json().name, 'n')

    const del = await w().inject({ method: 'DELETE', url: `/v1/agents/${a.id}`, token: org.token })
    assert.equal(del.statusCode, 200)
    assert.deepEqual(del.json(), { object: 'agent.deleted', id: a.id, deleted: true })
    assert.equal((await get(org, `/v1/agents/${a.id}`)).statusCode, 404)
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/agents/${a.id}`, token: org.token })).statusCode, 404)
  })

  it('lists newest first with limit and after', async () => {
    const org = await newOrg()
    await connect(org, ['gpt-x'])
    const ids: string[] = []
    for (let i = 0; i < 3; i++) {
      ids.unshift((await create(org, { name: `a${i}`, model: 'gpt-x' })).id)
      await sleep(2)
    }
    const p1 = (await get(org, '/v1/agents?limit=2')).json()
    assert.deepEqual(p1.data.map((a: { id: string }) => a.id), ids.slice(0, 2))
    assert.equal(p1.has_more, true)
    assert.equal(p1.last_id, ids[1])
    const p2 = (await get(org, `/v1/agents?limit=2&after=${p1.last_id}`)).json()
    assert.deepEqual(p2.data.map((a: { id: string }) => a.id), ids.slice(2))
    assert.equal(p2.has_more, false)
    assert.equal(p2.last_id, ids[2])
    assert.deepEqual((await get(org, '/v1/agents?after=agt_gone')).json(), { object: 'list', data: [], has_more: false, last_id: '' })
    for (const q of ['?limit=0', '?limit=101', '?order=desc']) {
      const res = await get(org, `/v1/agents${q}`)
      assert.equal(res.statusCode, 400, q)
    }
  })

  it('follows its model connection when that connection is deleted', async () => {
    const org = await newOrg()
    const a = await connect(org, ['gpt-x'])
    const b = await connect(org, ['gpt-x'])
    const agent = await create(org, { name: 'n', model: 'gpt-x' })
    assert.equal(agent.model_credential_id, a)
    const del = await w().inject({ method: 'DELETE', url: `/v1/model-credentials/${a}`, token: org.token })
    assert.equal(del.json().moved_to, b)
    assert.equal((await get(org, `/v1/agents/${agent.id}`)).json().model_credential_id, b)
  })

  it('needs agents:read to read and agents:write to change', async () => {
    const org = await newOrg()
    await connect(org, ['gpt-x'])
    const a = await create(org, { name: 'n', model: 'gpt-x' })
    const reader = await w().mint(undefined, ['agents:read'])
    const denied = await w().inject({ method: 'POST', url: '/v1/agents', token: reader.token, payload: { name: 'n', model: 'gpt-x' } })
    assert.equal(denied.statusCode, 403)
    assert.match(errorOf(denied).message, /agents:write/)
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/agents/${a.id}`, token: reader.token })).statusCode, 403)
    assert.equal((await w().inject({ method: 'GET', url: '/v1/agents', token: reader.token })).statusCode, 200)
    const none = await w().mint(undefined, ['models:read'])
    const res = await w().inject({ method: 'GET', url: `/v1/agents/${a.id}`, token: none.token })
    assert.equal(res.statusCode, 403)
    assert.match(errorOf(res).message, /agents:read/)
  })
})
