// The tool configuration through HTTP: GET and PUT /v1/sessions/{id}/tools speak the same
// vocabulary as session creation and stored agents, return entries as sent with credentials
// withheld, keep those credentials sealed in the store, and a change reaches a running turn at
// its next model step.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { errorOf, forEachDialect, startWarren, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, newOrg } from './turns.helpers.ts'
import { waitFor } from './fixtures.ts'
import { openToolEntry } from '../src/tools/tool-entries.ts'
import { chromiumAvailable } from '../src/tools/browser/browser-hub.ts'

const SECRETS = ['Bearer sk-mcp-very-secret-1', 'header-secret-value-2', 'env-secret-value-3']
const MCP = {
  type: 'mcp',
  name: 'docs',
  url: 'https://mcp.example.com/mcp',
  allowed_tools: ['search'],
  required: false,
  authorization: SECRETS[0],
  headers: { 'x-api-key': SECRETS[1] },
  timeout_seconds: 30,
}
const LOCAL = { type: 'mcp', name: 'local', command: 'node', args: ['server.js'], env: { TOKEN: SECRETS[2] } }
const LOOKUP = { type: 'function', name: 'lookup_order', description: 'Look up an order.', parameters: { type: 'object', properties: { id: { type: 'string' } } } }
const SECOND = { type: 'function', name: 'second_fn', description: 'Added while the turn waited.' }

const { authorization: _a, headers: _h, ...MCP_SHOWN } = MCP
const { env: _e, ...LOCAL_SHOWN } = LOCAL

forEachDialect('tool configuration', (dialect) => {
  const w = useWarren(dialect, { env: NO_RATE_LIMITS })
  /** The network types this deployment offers when no tools are named (Chromium is a fact of the host). */
  const offeredByDefault = (): string[] =>
    ['web_search', 'web_fetch', 'image_search', 'browse', 'browser_act', 'screenshot'].filter(
      (t) => !w().config.disabledTools.includes(t) && (!t.endsWith('_search') || w().config.searchUrl !== undefined) && (!['browse', 'browser_act', 'screenshot'].includes(t) || chromiumAvailable()),
    )
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  /** Every place in the store a credential could have landed, as text. */
  const storeText = async (): Promise<string> => {
    const db = w().store.db
    const parts = await Promise.all([
      db.selectFrom('sessions').select('agent').execute(),
      db.selectFrom('agents').select('tools').execute(),
      db.selectFrom('events').select('payload').execute(),
    ])
    return JSON.stringify(parts)
  }

  it('GET shows the default set; PUT replaces it, returns it as sent with credentials withheld and named, and GET agrees', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session()
    const initial = await c.call('GET', `/v1/sessions/${sid}/tools`)
    assert.equal(initial.statusCode, 200, initial.body)
    assert.deepEqual(initial.json(), { object: 'session.tools', tools: offeredByDefault().map((type) => ({ type })) })

    const put = await w().inject({ method: 'PUT', url: `/v1/sessions/${sid}/tools`, token: org.token, payload: { tools: [MCP, LOCAL, LOOKUP, { type: 'web_fetch' }] } })
    assert.equal(put.statusCode, 200, put.body)
    const expected = {
      object: 'session.tools',
      tools: [{ ...MCP_SHOWN, redacted: ['authorization', 'headers.x-api-key'] }, { ...LOCAL_SHOWN, redacted: ['env.TOKEN'] }, LOOKUP, { type: 'web_fetch' }],
    }
    assert.deepEqual(put.json(), expected)
    assert.deepEqual((await c.call('GET', `/v1/sessions/${sid}/tools`)).json(), expected)
    assert.deepEqual((await c.getSession(sid)).agent.tools, expected.tools)

    // [] means none, exactly.
    const none = await w().inject({ method: 'PUT', url: `/v1/sessions/${sid}/tools`, token: org.token, payload: { tools: [] } })
    assert.deepEqual(none.json(), { object: 'session.tools', tools: [] })
    assert.deepEqual((await c.call('GET', `/v1/sessions/${sid}/tools`)).json().tools, [])

    // Credentials appear nowhere: not in any response above, not in the store in plain text.
    for (const body of [put.body, none.body, JSON.stringify(await c.getSession(sid)), JSON.stringify(await c.items(sid))]) {
      for (const s of SECRETS) assert.equal(body.includes(s), false, `${s} leaked`)
    }
    const text = await storeText()
    for (const s of SECRETS) assert.equal(text.includes(s), false, `${s} is in the store in plain text`)
    // The change is in the log, in the internal vocabulary, credentials withheld; never an item.
    const logged = await w().store.db.selectFrom('events').select(['type', 'payload']).where('session_id', '=', sid).where('type', '=', 'session.tools_updated').execute()
    assert.equal(logged.length, 2)
    assert.deepEqual(JSON.parse(logged[0]!.payload).tools, expected.tools)
    assert.equal((await c.items(sid)).some((i) => JSON.stringify(i).includes('tools_updated')), false)
  })

  it('a session without tools lists the deployment’s real default set; types it does not offer, when named, are kept as sent', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const types = async (sid: string) => (await c.getSession(sid)).agent.tools.map((t: { type: string }) => t.type)
    // No search backend here: start-up says web_search and image_search are not offered, so no session lists them.
    assert.equal(w().config.searchUrl, undefined)
    const plain = await c.session()
    assert.deepEqual(await types(plain), offeredByDefault())
    assert.ok(!(await types(plain)).includes('web_search'))
    assert.deepEqual((await c.call('GET', `/v1/sessions/${plain}/tools`)).json().tools.map((t: { type: string }) => t.type), offeredByDefault())
    const agent = await c.call('POST', '/v1/agents', { name: 'defaults', model: 'm1' })
    assert.deepEqual(agent.json().tools.map((t: { type: string }) => t.type), offeredByDefault())
    // Named by the caller, a type the deployment does not offer comes back as sent.
    const named = await c.session({ tools: [{ type: 'web_search' }, { type: 'web_fetch' }] })
    assert.deepEqual(await types(named), ['web_search', 'web_fetch'])
  })

  it('with a search backend the default set lists web_search and image_search; a type turned off is not listed', async () => {
    const other = await startWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_SEARCH_URL: 'http://127.0.0.1:9', WARREN_DISABLED_TOOLS: 'web_fetch' } })
    try {
      const c = client(other, await newOrg(other))
      await c.connect(fake, 'openai')
      const sid = await c.session()
      const expected = ['web_search', 'image_search', ...(chromiumAvailable() ? ['browse', 'browser_act', 'screenshot'] : [])]
      assert.deepEqual((await c.getSession(sid)).agent.tools.map((t: { type: string }) => t.type), expected)
    } finally {
      await other.close()
    }
  })

  it('refuses what it cannot take, and changes nothing when it does', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session({ tools: [LOOKUP] })
    const put = (payload: unknown, token = org.token) => w().inject({ method: 'PUT', url: `/v1/sessions/${sid}/tools`, token, payload: payload as never })
    const unknown = await put({ tools: [{ ...MCP, secret_sauce: 1 }] })
    assert.equal(unknown.statusCode, 400)
    assert.match(errorOf(unknown).message, /Unknown field "tools\[0\]\.secret_sauce": a tool entry of type "mcp" accepts type, name, url, command, args, allowed_tools, required, authorization, headers, env, redacted, description, timeout_seconds/)
    const both = await put({ tools: [{ type: 'mcp', name: 'x', url: 'https://a.example', command: 'node' }] })
    assert.match(errorOf(both).message, /exactly one of "url" \(remote\) or "command" \(local\)/)
    assert.match(errorOf(await put({ tools: [{ type: 'telepathy' }] })).message, /"tools\[0\]\.type" must be one of/)
    assert.match(errorOf(await put({})).message, /Missing required field "tools"/)
    assert.equal((await put({ tools: [] }, (await newOrg(w())).token)).statusCode, 404)
    assert.deepEqual((await c.call('GET', `/v1/sessions/${sid}/tools`)).json().tools, [LOOKUP])
  })

  it('what GET returned can be PUT back as is: the credentials it withheld are kept; a name they do not hold is refused', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session({ tools: [MCP, LOCAL] })
    const read = (await c.call('GET', `/v1/sessions/${sid}/tools`)).json().tools
    const put = (tools: unknown) => w().inject({ method: 'PUT', url: `/v1/sessions/${sid}/tools`, token: org.token, payload: { tools } as never })
    // Back as it came, with one more allowed tool: the credentials stay, sealed.
    const edited = read.map((t: { name: string }) => (t.name === 'docs' ? { ...t, allowed_tools: ['search', 'fetch'] } : t))
    const res = await put(edited)
    assert.equal(res.statusCode, 200, res.body)
    assert.deepEqual(res.json().tools, edited)
    const stored = (await w().store.db.selectFrom('sessions').select('agent').where('id', '=', sid).executeTakeFirstOrThrow()).agent
    const tools = JSON.parse(stored).tools.map((t: never) => openToolEntry(w().box, t))
    assert.equal(tools[0].authorization, SECRETS[0])
    assert.deepEqual(tools[0].headers, { 'x-api-key': SECRETS[1] })
    assert.deepEqual(tools[1].env, { TOKEN: SECRETS[2] })
    // A new value sent beside redacted wins; a name the configuration does not hold is refused.
    const replaced = await put([{ ...read[0], authorization: 'Bearer new-one' }, read[1]])
    assert.equal(replaced.statusCode, 200, replaced.body)
    const after = JSON.parse((await w().store.db.selectFrom('sessions').select('agent').where('id', '=', sid).executeTakeFirstOrThrow()).agent).tools.map((t: never) => openToolEntry(w().box, t))
    assert.equal(after[0].authorization, 'Bearer new-one')
    assert.deepEqual(after[0].headers, { 'x-api-key': SECRETS[1] })
    const unknown = await put([{ ...read[0], redacted: ['headers.x-other'] }])
    assert.equal(unknown.statusCode, 400)
    assert.match(errorOf(unknown).message, /tools\[0\]\.redacted names "headers\.x-other", which the current configuration of "docs" does not hold/)
    // Where nothing is replaced (a new session), redacted has nothing to keep.
    const fresh = await c.call('POST', '/v1/sessions', { tools: [read[0]] })
    assert.equal(fresh.statusCode, 400)
    assert.match(errorOf(fresh).message, /no configuration here to keep credentials from/)
  })

  it('stored agents keep credentials sealed too, and a session started from one shows them withheld', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const created = await c.call('POST', '/v1/agents', { name: 'with-mcp', model: 'm1', tools: [MCP] })
    assert.equal(created.statusCode, 201, created.body)
    assert.deepEqual(created.json().tools, [{ ...MCP_SHOWN, redacted: ['authorization', 'headers.x-api-key'] }])
    const sid = await c.session({ agent: { id: created.json().id } })
    assert.deepEqual((await c.call('GET', `/v1/sessions/${sid}/tools`)).json().tools, [{ ...MCP_SHOWN, redacted: ['authorization', 'headers.x-api-key'] }])
    const text = await storeText()
    for (const s of SECRETS) assert.equal(text.includes(s), false, `${s} is in the store in plain text`)
  })

  it('a change reaches a running turn at its next model step', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session({ tools: [LOOKUP] })
    const before = fake.modelRequests.length
    fake.script({ toolCalls: [{ id: 'call_look', name: 'lookup_order', args: { id: 'A-1' } }] }, { text: 'Shipped.' })
    const turn = await c.accept(sid, 'where is A-1?')
    await waitFor('the turn waits for the function', async () => (await c.getSession(sid)).status === 'requires_action')
    const put = await w().inject({ method: 'PUT', url: `/v1/sessions/${sid}/tools`, token: org.token, payload: { tools: [LOOKUP, SECOND] } })
    assert.equal(put.statusCode, 200, put.body)
    const answered = await c.call('POST', `/v1/sessions/${sid}/required_actions/call_look`, { output: { status: 'shipped' } })
    assert.equal(answered.statusCode, 200, answered.body)
    assert.equal((await c.settled(sid, turn.id)).status, 'completed')
    const [first, second] = fake.modelRequests.slice(before)
    assert.ok(first!.tools.includes('lookup_order') && !first!.tools.includes('second_fn'), `first step: ${first!.tools}`)
    assert.ok(second!.tools.includes('second_fn'), `the next step is offered the new function: ${second!.tools}`)
  })
})
