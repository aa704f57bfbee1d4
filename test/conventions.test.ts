import { it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError } from './expect.ts'

// Conventions that hold everywhere (request ids, the error shape, refusing what is unknown, sizes,
// unknown paths and methods), proven through HTTP on the endpoints that exist.
forEachDialect('conventions', (dialect) => {
  const w = useWarren(dialect)

  it('gives every response an x-request-id, a fresh one each time, equal to error.request_id on failures', async () => {
    const responses = [
      await w().inject({ method: 'GET', url: '/v1/health' }),
      await w().inject({ method: 'GET', url: '/v1/tokens' }),
      await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null }),
      await w().inject({ method: 'HEAD', url: '/v1/health' }),
    ]
    const failures = [
      await w().inject({ method: 'GET', url: '/v1/health', token: null }),
      await w().inject({ method: 'GET', url: '/v1/no-such-thing' }),
      await w().inject({ method: 'PUT', url: '/v1/health' }),
      await w().inject({ method: 'GET', url: '/v1/health?x=1' }),
      await w().inject({ method: 'DELETE', url: '/v1/tokens/tok_never_issued' }),
      await w().inject({ method: 'GET', url: '/v1/%E0%A4%A' }),
    ]
    for (const res of [...responses, ...failures]) {
      const id = res.headers['x-request-id']
      assert.equal(typeof id, 'string', `no x-request-id on ${res.statusCode} ${res.body}`)
      assert.ok(String(id).length > 0)
    }
    for (const res of failures) expectError(res, res.statusCode, res.json().error.code)
    const ids = new Set([...responses, ...failures].map((r) => r.headers['x-request-id']))
    assert.equal(ids.size, responses.length + failures.length, 'request ids repeat')
  })

  it('assigns request ids itself: a caller-sent x-request-id is not echoed', async () => {
    const res = await w().inject({ method: 'GET', url: '/v1/nope', headers: { 'x-request-id': 'caller-chosen' } })
    const e = expectError(res, 404, 'not_found')
    assert.notEqual(e.request_id, 'caller-chosen')
  })

  it('answers in JSON, with integer Unix-ms timestamps and an object name on shaped objects', async () => {
    const before = Date.now()
    const res = await w().inject({ method: 'POST', url: '/v1/tokens', payload: { scopes: ['sessions:read'], expires_in_days: 7 } })
    assert.equal(res.statusCode, 201, res.body)
    assert.match(String(res.headers['content-type']), /^application\/json/)
    const t = res.json()
    assert.equal(t.object, 'token')
    assert.ok(Number.isInteger(t.created_at) && t.created_at >= before - 1000 && t.created_at <= Date.now() + 1000)
    assert.ok(Number.isInteger(t.expires_at))
    const health = (await w().inject({ method: 'GET', url: '/v1/health' })).json()
    assert.equal(health.object, 'health')
  })

  it('refuses an unknown query parameter by name, on every kind of endpoint', async () => {
    for (const url of ['/v1/health?verbose=1', '/v1/tokens?colour=red', '/v1/openapi.json?format=yaml']) {
      const res = await w().inject({ method: 'GET', url })
      const name = url.split('?')[1]!.split('=')[0]!
      const e = expectError(res, 400, 'invalid_request')
      assert.ok(e.message.includes(`"${name}"`), `${url}: message does not name ${name}: ${e.message}`)
    }
    const del = await w().inject({ method: 'DELETE', url: '/v1/tokens/tok_x?force=true' })
    assert.match(expectError(del, 400, 'invalid_request').message, /"force"/)
  })

  it('refuses an unknown body field by name and acts on nothing', async () => {
    const name = `conv-unknown-${Date.now()}`
    const res = await w().inject({ method: 'POST', url: '/v1/tokens', payload: { name, scopes: ['sessions:read'], expires_in_days: 7, colour: 'red' } })
    assert.match(expectError(res, 400, 'invalid_request').message, /"colour"/)
    const list = (await w().inject({ method: 'GET', url: '/v1/tokens?limit=100' })).json()
    assert.ok(!list.data.some((t: { name: string }) => t.name === name), 'a refused mint created a token')
  })

  it('refuses a body on an endpoint that reads none, naming the field, without acting', async () => {
    // DELETE of a token in the caller's own organization, with a field in the body.
    const victim = (await w().inject({ method: 'POST', url: '/v1/tokens', payload: { scopes: ['sessions:read'], expires_in_days: 7 } })).json()
    const res = await w().inject({ method: 'DELETE', url: `/v1/tokens/${victim.id}`, payload: { reason: 'cleanup' } })
    assert.match(expectError(res, 400, 'invalid_request').message, /"reason"/)
    const still = await w().inject({ method: 'GET', url: '/v1/health', token: victim.token })
    assert.equal(still.statusCode, 200, 'the refused DELETE revoked the token anyway')
    // A GET with a body is refused too: nothing unknown is ignored.
    const get = await w().inject({ method: 'GET', url: '/v1/health', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ verbose: true }) })
    assert.match(expectError(get, 400, 'invalid_request').message, /"verbose"/)
    // An empty object carries no field and is accepted.
    const empty = await w().inject({ method: 'DELETE', url: `/v1/tokens/${victim.id}`, payload: {} })
    assert.equal(empty.statusCode, 200, empty.body)
  })

  it('refuses malformed JSON and non-JSON bodies with 400 invalid_request', async () => {
    const bad = await w().inject({ method: 'POST', url: '/v1/tokens', headers: { 'content-type': 'application/json' }, payload: '{"scopes": ["sessions:read"], ' })
    expectError(bad, 400, 'invalid_request')
    const text = await w().inject({ method: 'POST', url: '/v1/tokens', headers: { 'content-type': 'text/plain' }, payload: 'scopes=sessions:read' })
    expectError(text, 400, 'invalid_request')
    const form = await w().inject({ method: 'POST', url: '/v1/tokens', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'a=b' })
    expectError(form, 400, 'invalid_request')
    const emptyJson = await w().inject({ method: 'POST', url: '/v1/tokens', headers: { 'content-type': 'application/json' }, payload: '' })
    expectError(emptyJson, 400, 'invalid_request')
  })

  it('refuses a body over 1 MiB with 400 invalid_request, not 413, and reads one just under it', async () => {
    const over = JSON.stringify({ name: 'x'.repeat(1024 * 1024), scopes: ['sessions:read'], expires_in_days: 7 })
    const res = await w().inject({ method: 'POST', url: '/v1/tokens', headers: { 'content-type': 'application/json' }, payload: over })
    assert.notEqual(res.statusCode, 413)
    assert.match(expectError(res, 400, 'invalid_request').message, /size|limit|large/i)
    // Just under 1 MiB is read: the refusal is then about the field, not the size.
    const under = JSON.stringify({ name: 'x'.repeat(1024 * 1024 - 200), scopes: ['sessions:read'], expires_in_days: 7 })
    assert.ok(Buffer.byteLength(under) < 1024 * 1024)
    const ok = await w().inject({ method: 'POST', url: '/v1/tokens', headers: { 'content-type': 'application/json' }, payload: under })
    const e = expectError(ok, 400, 'invalid_request')
    assert.match(e.message, /name/)
    assert.doesNotMatch(e.message, /size limit/)
  })

  it('refuses an over-limit body sent over a real socket the same way', async () => {
    const base = await w().listen()
    const res = await fetch(`${base}/v1/tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${w().token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'y'.repeat(2 * 1024 * 1024), scopes: ['sessions:read'], expires_in_days: 7 }),
    })
    assert.equal(res.status, 400)
    const body = await res.json()
    assert.deepEqual(Object.keys(body), ['error'])
    assert.equal(body.error.code, 'invalid_request')
    assert.equal(body.error.request_id, res.headers.get('x-request-id'))
  })

  it('answers an unknown path with 404 not_found, with or without a token', async () => {
    for (const url of ['/v1/nothing-here', '/v1/tokens/tok_1/extra', '/v2/health', '/', '/health']) {
      expectError(await w().inject({ method: 'GET', url }), 404, 'not_found')
      expectError(await w().inject({ method: 'GET', url, token: null }), 404, 'not_found')
    }
  })

  it('answers a known path with another method with 405 method_not_allowed and an Allow header', async () => {
    const cases: [string, string, string][] = [
      ['POST', '/v1/health', 'GET'],
      ['DELETE', '/v1/health', 'GET'],
      ['PUT', '/v1/tokens', 'GET'],
      ['PATCH', '/v1/tokens/tok_abc', 'DELETE'],
      ['GET', '/v1/tokens/tok_abc', 'DELETE'],
      ['POST', '/v1/openapi.json', 'GET'],
    ]
    for (const [method, url, allowed] of cases) {
      const res = await w().inject({ method: method as 'GET', url })
      const e = expectError(res, 405, 'method_not_allowed')
      assert.ok(String(res.headers.allow).split(', ').includes(allowed), `${method} ${url}: allow=${res.headers.allow}`)
      assert.ok(e.message.includes(method))
    }
    const both = await w().inject({ method: 'DELETE', url: '/v1/tokens' })
    expectError(both, 405, 'method_not_allowed')
    assert.deepEqual(String(both.headers.allow).split(', ').sort(), ['GET', 'POST'])
  })

  it('answers an undecodable URL and an over-long path segment in the error shape', async () => {
    expectError(await w().inject({ method: 'GET', url: '/v1/%E0%A4%A' }), 400, 'invalid_request')
    expectError(await w().inject({ method: 'DELETE', url: `/v1/tokens/${'t'.repeat(300)}` }), 404, 'not_found')
  })
})

// List conventions, on GET /v1/tokens.
forEachDialect('list conventions', (dialect) => {
  const w = useWarren(dialect)

  /** A fresh organization holding `n` tokens (the first is the caller); ids newest first. */
  async function orgWithTokens(n: number): Promise<{ caller: string; idsNewestFirst: string[] }> {
    const org = `list-${Math.random().toString(36).slice(2)}`
    const minted: { token: string; id: string }[] = []
    for (let i = 0; i < n; i++) {
      minted.push(await w().mint(org))
      await new Promise((r) => setTimeout(r, 2)) // distinct created_at, so "newest first" is observable
    }
    return { caller: minted[0]!.token, idsNewestFirst: minted.map((m) => m.id).reverse() }
  }

  it('returns the envelope {object, data, has_more, last_id} and nothing else, newest first', async () => {
    const { caller, idsNewestFirst } = await orgWithTokens(3)
    const res = await w().inject({ method: 'GET', url: '/v1/tokens', token: caller })
    assert.equal(res.statusCode, 200, res.body)
    const body = res.json()
    assert.deepEqual(Object.keys(body).sort(), ['data', 'has_more', 'last_id', 'object'])
    assert.equal(body.object, 'list')
    assert.equal(body.has_more, false)
    assert.deepEqual(body.data.map((t: { id: string }) => t.id), idsNewestFirst)
    assert.equal(body.last_id, idsNewestFirst.at(-1))
    for (const t of body.data) {
      assert.equal(t.object, 'token')
      assert.equal(t.token, undefined, 'a listing shows a secret')
    }
  })

  it('decides has_more by looking one row past the page, and walks pages with after', async () => {
    const { caller, idsNewestFirst } = await orgWithTokens(4)
    const page = async (q: string) => {
      const res = await w().inject({ method: 'GET', url: `/v1/tokens?${q}`, token: caller })
      assert.equal(res.statusCode, 200, res.body)
      return res.json() as { data: { id: string }[]; has_more: boolean; last_id: string }
    }
    // Exactly as many rows as the limit: nothing more, so has_more is false (not "page was full").
    const all = await page('limit=4')
    assert.equal(all.data.length, 4)
    assert.equal(all.has_more, false)
    const three = await page('limit=3')
    assert.equal(three.has_more, true)
    // Two full pages of two: the second is full yet the last.
    const p1 = await page('limit=2')
    assert.deepEqual(p1.data.map((t) => t.id), idsNewestFirst.slice(0, 2))
    assert.equal(p1.has_more, true)
    assert.equal(p1.last_id, idsNewestFirst[1])
    const p2 = await page(`limit=2&after=${p1.last_id}`)
    assert.deepEqual(p2.data.map((t) => t.id), idsNewestFirst.slice(2, 4))
    assert.equal(p2.has_more, false)
    const p3 = await page(`limit=2&after=${p2.last_id}`)
    assert.deepEqual(p3, { object: 'list', data: [], has_more: false, last_id: '' })
  })

  it('defaults to 20 a page and accepts 1 and 100', async () => {
    const { caller } = await orgWithTokens(22)
    const def = (await w().inject({ method: 'GET', url: '/v1/tokens', token: caller })).json()
    assert.equal(def.data.length, 20)
    assert.equal(def.has_more, true)
    const one = (await w().inject({ method: 'GET', url: '/v1/tokens?limit=1', token: caller })).json()
    assert.equal(one.data.length, 1)
    const hundred = (await w().inject({ method: 'GET', url: '/v1/tokens?limit=100', token: caller })).json()
    assert.equal(hundred.data.length, 22)
    assert.equal(hundred.has_more, false)
  })

  it('refuses a limit out of range or not an integer with 400, never clamping', async () => {
    for (const limit of ['0', '101', 'abc', '-1', '2.5', '', '1e9']) {
      const res = await w().inject({ method: 'GET', url: `/v1/tokens?limit=${limit}` })
      assert.match(expectError(res, 400, 'invalid_request').message, /limit/, `limit=${limit}`)
    }
  })

  it('orders tokens oldest first with order=asc, newest first with order=desc or none; refuses another order', async () => {
    const { caller, idsNewestFirst } = await orgWithTokens(3)
    const ids = async (q: string) => {
      const res = await w().inject({ method: 'GET', url: `/v1/tokens${q}`, token: caller })
      assert.equal(res.statusCode, 200, res.body)
      return res.json().data.map((t: { id: string }) => t.id)
    }
    assert.deepEqual(await ids('?order=asc'), [...idsNewestFirst].reverse())
    assert.deepEqual(await ids('?order=desc'), idsNewestFirst)
    assert.deepEqual(await ids(''), idsNewestFirst)
    assert.deepEqual(await ids(`?order=asc&limit=1&after=${idsNewestFirst[2]}`), [idsNewestFirst[1]])
    expectError(await w().inject({ method: 'GET', url: '/v1/tokens?order=sideways', token: caller }), 400, 'invalid_request')
  })

  it('refuses order on the collections that have none: agents, webhooks, model connections, environment profiles', async () => {
    for (const path of ['/v1/agents', '/v1/webhooks', '/v1/model-credentials', '/v1/environment-profiles']) {
      for (const order of ['asc', 'desc']) {
        const res = await w().inject({ method: 'GET', url: `${path}?order=${order}` })
        assert.match(expectError(res, 400, 'invalid_request').message, /"order"/, `${path}?order=${order}`)
      }
    }
  })

  it('gives an empty last page for a cursor it cannot place: never issued, revoked, or another organization', async () => {
    const { caller } = await orgWithTokens(3)
    const foreign = await w().mint()
    const revoked = (await w().inject({ method: 'POST', url: '/v1/tokens', token: caller, payload: { scopes: ['sessions:read'], expires_in_days: 7 } })).json()
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/tokens/${revoked.id}`, token: caller })).statusCode, 200)
    for (const after of ['tok_never_issued', foreign.id, revoked.id]) {
      const res = await w().inject({ method: 'GET', url: `/v1/tokens?after=${after}`, token: caller })
      assert.equal(res.statusCode, 200, res.body)
      const body = res.json()
      assert.deepEqual(body.data, [], `after=${after}`)
      assert.equal(body.has_more, false)
      assert.equal(body.object, 'list')
    }
  })
})
