import { before, it } from 'node:test'
import assert from 'node:assert/strict'
import net from 'node:net'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError } from './expect.ts'
import { ACTIONS_ENV, createSession, getSession, newOrg, waitForStatus } from './turn-actions-helpers.ts'
import { MAX_JSON_DEPTH } from '../src/http/hostile-input.ts'

/** JSON text of an object nested `levels` deep ({"a":{"a":…1…}}), written by hand: JSON.stringify itself overflows past a few thousand. */
const nested = (levels: number): string => '{"a":'.repeat(levels) + '1' + '}'.repeat(levels)
const DEEP = nested(5000)
const fn = (parameters: string) => `{"type":"function","name":"f","parameters":${parameters}}`

type RawAnswer = { status: number; headers: Record<string, string>; body: string }

/** Sends bytes on a fresh socket (then half-closes it) and reads whatever comes back until the server closes. */
function raw(base: string, bytes: string): Promise<RawAnswer> {
  const { hostname, port } = new URL(base)
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname)
    const chunks: Buffer[] = []
    socket.on('data', (c) => chunks.push(c))
    socket.on('error', reject)
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8')
      const [head = '', ...rest] = text.split('\r\n\r\n')
      const [statusLine = '', ...lines] = head.split('\r\n')
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]))
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n') })
    })
    socket.end(bytes)
  })
}

/** A refusal in the specification's shape, request id and header agreeing, from a raw answer. */
function rawError(res: RawAnswer, status: number): { code: string; message: string; request_id: string } {
  assert.equal(res.status, status, `${res.status} ${JSON.stringify(res.headers)} ${res.body}`)
  assert.match(res.headers['content-type'] ?? '', /^application\/json/)
  const body = JSON.parse(res.body) as { error: { code: string; message: string; request_id: string } }
  assert.deepEqual(Object.keys(body), ['error'], res.body)
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'request_id'])
  assert.match(body.error.request_id, /^req_/)
  assert.equal(res.headers['x-request-id'], body.error.request_id)
  return body.error
}

// Hostile input answered with the error shape, never a 5xx.
forEachDialect('hostile input', (dialect) => {
  const w = useWarren(dialect, { env: ACTIONS_ENV })
  // With an Idempotency-Key: its fingerprint of the body is taken after the depth is checked.
  const send = (method: 'POST' | 'PUT', url: string, text: string) =>
    w().inject({ method, url, headers: { 'content-type': 'application/json', 'idempotency-key': `k-${Math.random()}` }, payload: text })
  let agentId: string

  before(async () => {
    const mc = await w().inject({ method: 'POST', url: '/v1/model-credentials', payload: { provider: 'openai', api_key: 'sk-hostile-1', models: ['gpt-test'] } })
    assert.equal(mc.statusCode, 201, mc.body)
    const agent = await w().inject({ method: 'POST', url: '/v1/agents', payload: { name: 'kept', model: 'gpt-test', text: { format: 'plain' } } })
    assert.equal(agent.statusCode, 201, agent.body)
    agentId = agent.json().id
  })

  it(`refuses free-form JSON nested deeper than ${MAX_JSON_DEPTH} levels with 400 naming the field, and stores nothing`, async () => {
    const session = await w().inject({ method: 'POST', url: '/v1/sessions', payload: { title: 'target' } })
    assert.equal(session.statusCode, 201, session.body)
    const sid = session.json().id
    const toolsBefore = (await w().inject({ method: 'GET', url: `/v1/sessions/${sid}/tools` })).json()
    const cases: [method: 'POST' | 'PUT', url: string, body: string, field: string][] = [
      ['POST', '/v1/sessions', `{"tools":[${fn(DEEP)}]}`, 'tools[0].parameters'],
      ['POST', '/v1/sessions', `{"agent":{"model":"gpt-test","tools":[${fn(DEEP)}]}}`, 'agent.tools[0].parameters'],
      ['POST', '/v1/agents', `{"name":"deep","model":"gpt-test","text":${DEEP}}`, 'text'],
      ['POST', '/v1/agents', `{"name":"deep","model":"gpt-test","tools":[${fn(DEEP)}]}`, 'tools[0].parameters'],
      ['POST', `/v1/agents/${agentId}`, `{"text":${DEEP}}`, 'text'],
      ['PUT', `/v1/sessions/${sid}/tools`, `{"tools":[{"type":"web_fetch"},${fn(DEEP)}]}`, 'tools[1].parameters'],
    ]
    for (const [method, url, body, field] of cases) {
      const e = expectError(await send(method, url, body), 400, 'invalid_request')
      assert.ok(e.message.includes(`"${field}"`), `${method} ${url}: the message does not name ${field}: ${e.message}`)
      assert.ok(e.message.includes(String(MAX_JSON_DEPTH)), `the message does not give the ceiling: ${e.message}`)
    }
    const sessions = (await w().inject({ method: 'GET', url: '/v1/sessions?limit=100' })).json().data
    assert.deepEqual(sessions.map((s: { id: string }) => s.id), [sid], 'a refused session was created')
    const agents = (await w().inject({ method: 'GET', url: '/v1/agents?limit=100' })).json().data
    assert.deepEqual(agents.map((a: { id: string; text: unknown }) => [a.id, a.text]), [[agentId, { format: 'plain' }]], 'a refused agent was stored or changed')
    assert.deepEqual((await w().inject({ method: 'GET', url: `/v1/sessions/${sid}/tools` })).json(), toolsBefore, 'refused tools replaced the session’s')
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/sessions/${sid}` })).statusCode, 200)
  })

  it(`accepts free-form JSON nested exactly ${MAX_JSON_DEPTH} levels and gives it back; one more is refused`, async () => {
    const ok = await send('POST', `/v1/agents/${agentId}`, `{"text":${nested(MAX_JSON_DEPTH)}}`)
    assert.equal(ok.statusCode, 200, ok.body.slice(0, 300))
    assert.equal(JSON.stringify(ok.json().text), nested(MAX_JSON_DEPTH))
    const got = await w().inject({ method: 'GET', url: `/v1/agents/${agentId}` })
    assert.equal(JSON.stringify(got.json().text), nested(MAX_JSON_DEPTH))
    expectError(await send('POST', `/v1/agents/${agentId}`, `{"text":${nested(MAX_JSON_DEPTH + 1)}}`), 400, 'invalid_request')
    // Arrays count as levels too.
    const arrays = '['.repeat(MAX_JSON_DEPTH) + ']'.repeat(MAX_JSON_DEPTH)
    expectError(await send('POST', `/v1/agents/${agentId}`, `{"text":{"a":${arrays}}}`), 400, 'invalid_request')
    const restored = await w().inject({ method: 'POST', url: `/v1/agents/${agentId}`, payload: { text: { format: 'plain' } } })
    assert.equal(restored.statusCode, 200, restored.body)
  })

  it('filters sessions by metadata keys holding quotes, backslashes, $, dots and brackets, each bound as a value', async () => {
    const odd: Record<string, string> = { 'a"b': 'quote', 'a\\b': 'backslash', $: 'dollar', 'a.b': 'dot', '[0]': 'bracket', 'x]': 'close', "it's": 'apostrophe', '$."a"': 'path', 'a b': 'space' }
    const plain = { a: 'dot', b: 'dot', '0': 'bracket', x: 'close', it: 'apostrophe' }
    const create = async (metadata: Record<string, string>) => {
      const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload: { metadata } })
      assert.equal(res.statusCode, 201, res.body)
      return res.json().id as string
    }
    const oddId = await create(odd)
    const plainId = await create(plain)
    const filter = async (...pairs: [string, string][]) => {
      const qs = pairs.map(([k, v]) => `metadata=${encodeURIComponent(`${k}:${v}`)}`).join('&')
      const res = await w().inject({ method: 'GET', url: `/v1/sessions?${qs}` })
      assert.equal(res.statusCode, 200, `${qs}: ${res.body}`)
      return res.json().data.map((s: { id: string }) => s.id)
    }
    for (const [k, v] of Object.entries(odd)) {
      assert.deepEqual(await filter([k, v]), [oddId], `metadata=${k}:${v}`)
      assert.deepEqual(await filter([k, `${v}x`]), [], `metadata=${k}:${v}x`)
    }
    assert.deepEqual(await filter(['a', 'dot']), [plainId])
    assert.deepEqual(await filter(['a"b', 'quote'], ['$', 'dollar']), [oddId])
    assert.deepEqual(await filter(['a"b', 'quote'], ['a', 'dot']), [])
    assert.deepEqual(await filter(['"', 'x'], ['\\', 'x'], ['[', 'x'], ['.', 'x']), [])
    for (const id of [oddId, plainId]) assert.equal((await w().inject({ method: 'DELETE', url: `/v1/sessions/${id}` })).statusCode, 200)
  })

  it('refuses NUL (which PostgreSQL cannot hold) in a metadata filter and in metadata itself, with 400', async () => {
    // A filter is only evaluated against rows: there must be one.
    const live = await w().inject({ method: 'POST', url: '/v1/sessions', payload: { metadata: { a: 'b' } } })
    assert.equal(live.statusCode, 201, live.body)
    for (const q of ['%00:%00', 'a%00:b', 'a:b%00', '%00:']) {
      const e = expectError(await w().inject({ method: 'GET', url: `/v1/sessions?metadata=${q}` }), 400, 'invalid_request')
      assert.match(e.message, /"metadata/, q)
    }
    for (const metadata of [{ 'a\u0000b': 'x' }, { a: 'x\u0000' }]) {
      const body = JSON.stringify({ metadata })
      const res = await send('POST', '/v1/sessions', body)
      assert.match(expectError(res, 400, 'invalid_request').message, /"metadata/, body)
    }
    // A filter over 64 characters of key or 512 of value can match nothing, so it is refused like one.
    expectError(await w().inject({ method: 'GET', url: `/v1/sessions?metadata=${'k'.repeat(65)}:v` }), 400, 'invalid_request')
    expectError(await w().inject({ method: 'GET', url: `/v1/sessions?metadata=k:${'v'.repeat(513)}` }), 400, 'invalid_request')
    assert.equal((await w().inject({ method: 'GET', url: '/v1/sessions?metadata=a%3Ab:c' })).json().data.length, 0, 'a key is read up to the first colon')
    assert.equal((await w().inject({ method: 'GET', url: '/v1/sessions?metadata=a:b' })).json().data.length, 1)
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/sessions/${live.json().id}` })).statusCode, 200)
  })

  it('answers what the HTTP server refuses before routing (oversized headers, malformed requests, cut bodies) in the error shape, with x-request-id', async () => {
    const base = await w().listen()
    const big = rawError(await raw(base, `GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${'a'.repeat(100 * 1024)}\r\n\r\n`), 400)
    assert.equal(big.code, 'invalid_request')
    assert.match(big.message, /header/i)
    const requestLine = rawError(await raw(base, 'GARBAGE\r\n\r\n'), 400)
    assert.equal(requestLine.code, 'invalid_request')
    assert.equal(rawError(await raw(base, 'GET /v1/health HTTP/1.1\r\nHost: x\r\nBad Header Name: y\r\n\r\n'), 400).code, 'invalid_request')
    assert.equal(rawError(await raw(base, 'GET /v1/health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc'), 400).code, 'invalid_request')
    // The body ends (the client half-closes) before Content-Length is reached.
    const cut = await raw(base, `POST /v1/tokens HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${w().token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"scopes":`)
    assert.match(rawError(cut, 400).message, /ended before/)
    // The listener goes on serving.
    const ok = await fetch(`${base}/v1/health`, { headers: { authorization: `Bearer ${w().token}` } })
    assert.equal(ok.status, 200, await ok.text())
  })

  it('refuses NUL in ids (404), query values and body text (400) alike on both dialects, naming where', async () => {
    for (const url of ['/v1/sessions/%00', '/v1/agents/a%00b', '/v1/sessions/%00/preview/proxy/x']) {
      expectError(await w().inject({ method: 'GET', url }), 404, 'not_found')
    }
    for (const url of ['/v1/sessions?after=%00', '/v1/tokens?after=a%00', `/v1/sessions?status=%00`]) {
      assert.match(expectError(await w().inject({ method: 'GET', url }), 400, 'invalid_request').message, /Query parameter "(after|status)" holds NUL/, url)
    }
    const cases: [string, string, RegExp][] = [
      ['/v1/sessions', '{"title":"a\\u0000b"}', /"title" holds NUL/],
      ['/v1/sessions', '{"input":"\\u0000"}', /"input" holds NUL/],
      ['/v1/agents', '{"name":"n","model":"gpt-test","text":{"a":["x","\\u0000"]}}', /"text\.a\[1\]" holds NUL/],
      ['/v1/agents', '{"name":"n","model":"gpt-test","text":{"k\\u0000":1}}', /A key of "text" holds NUL/],
    ]
    for (const [url, body, message] of cases) assert.match(expectError(await send('POST', url, body), 400, 'invalid_request').message, message, body)
    const sessions = (await w().inject({ method: 'GET', url: '/v1/sessions?limit=100' })).json().data
    assert.equal(sessions.length, 0, 'a refused session was created')
  })

  it('refuses the deep output of an answered required action with 400 naming "output"; the action stays open', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { agent: { model: 'm1', tools: [{ type: 'function', name: 'lookup' }] } })
    org.fake.script({ toolCalls: [{ id: 'call_deep', name: 'lookup', args: {} }] }, { text: 'Done.' })
    const sent = await org.call('POST', `/v1/sessions/${s.id}/messages`, { text: 'look it up' })
    assert.equal(sent.statusCode, 202, sent.body)
    await waitForStatus(org, s.id, 'requires_action')
    const url = `/v1/sessions/${s.id}/required_actions/call_deep`
    const res = await w().inject({ method: 'POST', url, token: org.token, headers: { 'content-type': 'application/json' }, payload: `{"output":${DEEP}}` })
    assert.match(expectError(res, 400, 'invalid_request').message, /"output"/)
    const still = await getSession(org, s.id)
    assert.equal(still.status, 'requires_action')
    assert.deepEqual(still.required_actions.map((a: { call_id: string }) => a.call_id), ['call_deep'])
    const answered = await org.call('POST', url, { output: { found: true } })
    assert.equal(answered.statusCode, 200, answered.body)
  })
})
