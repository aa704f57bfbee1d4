// Remote MCP servers through HTTP: a real MCP server (the SDK's, over streamable HTTP) declared
// on a session; its tools are offered as mcp__{server}__{tool}, called with their arguments, and
// what they answer (text, images, structured content) reaches the next model request. Read-only
// mode, permission rules, time-outs, servers that will not connect, and credentials that never
// reappear anywhere.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { startFakeMcp, TINY_PNG, type FakeMcp } from './fakes/mcp-server.ts'
import { NO_RATE_LIMITS, client, details, newOrg } from './turns.helpers.ts'
import { waitFor } from './fixtures.ts'

/** A tool result's text as the model got it (the OpenAI wire wraps an error as {"error": …}). */
const textOf = (r: { content: string }): string => (r.content.startsWith('{"error"') ? (JSON.parse(r.content) as { error: string }).error : r.content)
const isErrorText = (r: { content: string; isError?: boolean }): boolean => r.isError === true || r.content.startsWith('{"error"')

const SECRET = 'Bearer mcp-secret-7f3a9'
const HEADER_SECRET = 'hdr-secret-51c2'

forEachDialect('remote MCP servers', (dialect) => {
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_ALLOW_PRIVATE_MCP: '1' } })
  let fake: FakeModelServer
  let mcp: FakeMcp
  let closedUrl: string
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    mcp = await startFakeMcp({ authorization: SECRET })
    const gone = await startFakeMcp()
    closedUrl = gone.url
    await gone.close()
  })
  after(async () => {
    await fake.close()
    await mcp.close()
  })

  const docs = (extra: Record<string, unknown> = {}) => ({
    type: 'mcp',
    name: 'docs',
    url: mcp.url,
    authorization: SECRET,
    headers: { 'x-team': HEADER_SECRET },
    allowed_tools: ['search', 'create_note', 'snapshot', 'slow'],
    ...extra,
  })

  async function run(session: Record<string, unknown>, ...steps: Parameters<FakeModelServer['script']>) {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, (session.provider as 'openai' | 'anthropic' | undefined) ?? 'openai')
    const { provider: _p, ...body } = session
    const sid = await c.session(body)
    const before = fake.modelRequests.length
    fake.script(...steps)
    const turn = await c.accept(sid, 'use the docs')
    const settled = await c.settled(sid, turn.id, 60_000)
    return { c, sid, turn: settled, requests: fake.modelRequests.slice(before), items: await c.items(sid) }
  }

  it('offers the allowed tools under mcp__docs__…, calls one with its arguments and credentials, and the answer reaches the model', async () => {
    const { turn, requests, items, c, sid } = await run(
      { tools: [docs()] },
      { toolCalls: [{ id: 'call_s', name: 'mcp__docs__search', args: { q: 'previews' } }] },
      { text: 'Found them.' },
    )
    assert.equal(turn.status, 'completed', JSON.stringify(turn.error))
    const offered = requests[0]!.tools
    for (const name of ['mcp__docs__search', 'mcp__docs__create_note', 'mcp__docs__snapshot', 'mcp__docs__slow']) assert.ok(offered.includes(name), `${name} offered: ${offered}`)
    assert.ok(!offered.includes('mcp__docs__hidden'), 'a tool outside allowed_tools is never offered')
    const wireTool = (requests[0]!.body.tools as { function?: { name: string; parameters: { properties: object } }; name?: string }[]).find((t) => (t.function?.name ?? t.name) === 'mcp__docs__search')
    assert.deepEqual(Object.keys(wireTool!.function!.parameters.properties), ['q'], 'with the server’s own JSON Schema')
    assert.deepEqual(mcp.calls.at(-1), { tool: 'search', args: { q: 'previews' } })
    assert.equal(mcp.headers.at(-1)!['x-team'], HEADER_SECRET)
    assert.deepEqual(requests[1]!.toolResults.map((r) => [r.toolCallId, textOf(r), isErrorText(r)]), [['call_s', '3 results for "previews"', false]])
    // Shown like any tool call, as tool_call items.
    assert.deepEqual(details(items, 'agent.tool_call').map((d) => d.toolName), ['mcp__docs__search'])
    assert.equal(details(items, 'agent.tool_result')[0]!.isError, false)
    // The credentials appear in no response, event or item.
    const everything = JSON.stringify([items, await c.getSession(sid), (await c.call('GET', `/v1/sessions/${sid}/tools`)).json()])
    assert.ok(!everything.includes(SECRET) && !everything.includes(HEADER_SECRET))
    assert.ok(everything.includes('"redacted":["authorization","headers.x-team"]'))
  })

  it('read_only runs only tools the server declares read-only; an unannotated one is refused with denied_read_only', async () => {
    const calls = mcp.calls.length
    const { turn, requests, items } = await run(
      { tools: [docs()], agent: { approval_mode: 'read_only' } },
      { toolCalls: [{ id: 'call_r', name: 'mcp__docs__search', args: { q: 'x' } }, { id: 'call_w', name: 'mcp__docs__create_note', args: { title: 'T' } }] },
      { text: 'Done.' },
    )
    assert.equal(turn.status, 'completed')
    assert.deepEqual(mcp.calls.slice(calls).map((c) => c.tool), ['search'], 'create_note never reached the server')
    const results = requests[1]!.toolResults
    assert.equal(isErrorText(results.find((r) => r.toolCallId === 'call_r')!), false)
    assert.match(textOf(results.find((r) => r.toolCallId === 'call_w')!), /^Not run: The session is read-only/)
    assert.deepEqual(details(items, 'approval.resolved').map((d) => [d.name, d.code]), [['mcp__docs__create_note', 'denied_read_only']])
  })

  it('ask mode asks before a tool not declared read-only and runs it once approved; a read-only one runs without asking', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session({ tools: [docs()], agent: { approval_mode: 'ask' } })
    const calls = mcp.calls.length
    fake.script({ toolCalls: [{ id: 'call_r', name: 'mcp__docs__search', args: { q: 'a' } }, { id: 'call_w', name: 'mcp__docs__create_note', args: { title: 'N' } }] }, { text: 'Done.' })
    const turn = await c.accept(sid, 'go')
    await waitFor('the approval is asked for', async () => details(await c.items(sid), 'approval.requested').length === 1)
    const asked = details(await c.items(sid), 'approval.requested')[0]!
    assert.equal(asked.name, 'mcp__docs__create_note')
    assert.deepEqual(mcp.calls.slice(calls).map((x) => x.tool), ['search'], 'the read-only tool ran without asking; the other waits')
    const ok = await c.call('POST', `/v1/sessions/${sid}/approvals/call_w`, { approved: true })
    assert.equal(ok.statusCode, 200, ok.body)
    assert.equal((await c.settled(sid, turn.id)).status, 'completed')
    assert.deepEqual(mcp.calls.slice(calls).map((x) => x.tool), ['search', 'create_note'])
  })

  it('permission rules match the prefixed name with globs', async () => {
    const calls = mcp.calls.length
    const { requests, items } = await run(
      { tools: [docs()], agent: { permission_rules: [{ tool: 'mcp__docs__create*', decision: 'deny' }] } },
      { toolCalls: [{ id: 'call_w', name: 'mcp__docs__create_note', args: { title: 'T' } }] },
      { text: 'Refused.' },
    )
    assert.equal(mcp.calls.length, calls)
    assert.match(textOf(requests[1]!.toolResults[0]!), /refused by the session's permission rule \(tool "mcp__docs__create\*"\)/)
    assert.equal(details(items, 'approval.resolved')[0]!.code, 'denied_by_rule')
  })

  it('structured content and images reach the model', async () => {
    const { requests } = await run(
      { tools: [docs()], provider: 'anthropic' },
      { toolCalls: [{ id: 'toolu_n', name: 'mcp__docs__create_note', args: { title: 'T' } }] },
      { toolCalls: [{ id: 'toolu_p', name: 'mcp__docs__snapshot', args: {} }] },
      { text: 'Seen.' },
    )
    assert.equal(requests[1]!.toolResults[0]!.content, 'note "T" created')
    const last = JSON.stringify(requests[2]!.body.messages.at(-1))
    assert.ok(last.includes(TINY_PNG), 'the image is in the tool result sent to the model')
    assert.ok(last.includes('the front page'))
  })

  it('falls back to the HTTP+SSE transport for a server that speaks only that', async () => {
    const old = await startFakeMcp({ authorization: SECRET, sseOnly: true })
    try {
      const { turn, requests } = await run(
        { tools: [docs({ name: 'legacy', url: old.url })] },
        { toolCalls: [{ id: 'call_l', name: 'mcp__legacy__search', args: { q: 'old' } }] },
        { text: 'Done.' },
      )
      assert.equal(turn.status, 'completed')
      assert.equal(textOf(requests[1]!.toolResults[0]!), '3 results for "old"')
      assert.deepEqual(old.calls, [{ tool: 'search', args: { q: 'old' } }])
      assert.ok(old.headers.some((h) => h.accept?.includes('text/event-stream') && h.authorization === SECRET), 'the stream was opened with the credentials')
    } finally {
      await old.close()
    }
  })

  it('a call past timeout_seconds is an error result, and the turn goes on', async () => {
    const { turn, requests } = await run(
      { tools: [docs({ timeout_seconds: 1 })] },
      { toolCalls: [{ id: 'call_slow', name: 'mcp__docs__slow', args: {} }] },
      { text: 'Too slow.' },
    )
    assert.equal(turn.status, 'completed')
    const r = requests[1]!.toolResults[0]!
    assert.equal(isErrorText(r), true)
    assert.match(textOf(r), /The MCP server docs failed the call: .*(timed out|timeout)/i)
  })

  it('a server that will not connect: skipped with mcp.unavailable when not required; the turn fails naming it when required', async () => {
    const skipped = await run(
      { tools: [docs(), { type: 'mcp', name: 'gone', url: closedUrl, required: false }] },
      { toolCalls: [{ id: 'call_s', name: 'mcp__docs__search', args: { q: 'y' } }] },
      { text: 'Fine without it.' },
    )
    assert.equal(skipped.turn.status, 'completed')
    const unavailable = skipped.items.filter((i) => i.type === 'mcp_unavailable')
    assert.equal(unavailable.length, 1, 'reported once for the turn, not once a step')
    assert.equal(unavailable[0]!.detail.server, 'gone')
    assert.match(String(unavailable[0]!.detail.reason), /ECONNREFUSED|fetch failed|connect/i)
    // Named by a name, the server's failure says what failed, never the address the name resolved to.
    const named = await run({ tools: [{ type: 'mcp', name: 'gone', url: closedUrl.replace('127.0.0.1', 'localhost'), required: false }] }, { text: 'ok' })
    const namedReason = String(named.items.find((i) => i.type === 'mcp_unavailable')!.detail.reason)
    assert.match(namedReason, /refused/i)
    assert.ok(!/127\.0\.0\.1|::1/.test(namedReason), namedReason)
    assert.ok(skipped.requests[0]!.tools.includes('mcp__docs__search') && !skipped.requests[0]!.tools.some((t) => t.startsWith('mcp__gone')))

    const failed = await run({ tools: [{ type: 'mcp', name: 'gone', url: closedUrl, required: true }] }, { text: 'never asked' })
    assert.equal(failed.turn.status, 'failed')
    assert.equal(failed.turn.error?.code, 'sandbox_error')
    assert.match(failed.turn.error!.message, /required MCP server "gone" would not connect/)
    assert.equal(failed.requests.length, 0, 'the model was never called')

    // A wrong credential is a server that will not connect, and its reason never quotes the credential.
    const refused = await run({ tools: [docs({ authorization: 'Bearer wrong-one-99', required: false })] }, { text: 'ok' })
    const reason = String(refused.items.find((i) => i.type === 'mcp_unavailable')!.detail.reason)
    assert.ok(!reason.includes('wrong-one-99'), reason)
  })
})

forEachDialect('remote MCP servers behind the SSRF guard', (dialect) => {
  const w = useWarren(dialect, { env: NO_RATE_LIMITS })
  let fake: FakeModelServer
  let mcp: FakeMcp
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    mcp = await startFakeMcp()
  })
  after(async () => {
    await fake.close()
    await mcp.close()
  })

  it('refuses a server on a loopback address unless the deployment allows it, and says how', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session({ tools: [{ type: 'mcp', name: 'local', url: mcp.url }, { type: 'mcp', name: 'named', url: mcp.url.replace('127.0.0.1', 'localhost') }] })
    fake.script({ text: 'ok' })
    const turn = await c.accept(sid, 'hi')
    assert.equal((await c.settled(sid, turn.id)).status, 'completed')
    const reasons = (await c.items(sid)).filter((i) => i.type === 'mcp_unavailable').map((i) => String(i.detail.reason))
    assert.equal(reasons.length, 2)
    for (const r of reasons) assert.match(r, /WARREN_ALLOW_PRIVATE_MCP/)
    assert.equal(mcp.headers.length, 0, 'nothing reached the server')
  })
})

forEachDialect('remote MCP servers with WARREN_ALLOW_PRIVATE_MCP=1', (dialect) => {
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_ALLOW_PRIVATE_MCP: '1' } })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(async () => {
    await fake.close()
  })

  it('still refuses the metadata and link-local addresses, before any connection', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const urls = ['http://169.254.169.254/mcp', 'http://[fd00:ec2::254]/mcp', 'http://[fe80::1]:8080/mcp']
    const sid = await c.session({ tools: urls.map((url, i) => ({ type: 'mcp', name: `meta${i}`, url })) })
    fake.script({ text: 'ok' })
    const turn = await c.accept(sid, 'hi')
    assert.equal((await c.settled(sid, turn.id)).status, 'completed')
    const reasons = (await c.items(sid)).filter((i) => i.type === 'mcp_unavailable').map((i) => String(i.detail.reason))
    assert.equal(reasons.length, urls.length)
    for (const r of reasons) assert.match(r, /is a (link-local|private \(unique local\)) address; .*WARREN_ALLOW_PRIVATE_MCP/)
  })
})
