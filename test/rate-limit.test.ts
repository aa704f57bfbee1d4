import { it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren, type Warren } from './harness.ts'
import { expectError, rateHeaders, sleep } from './expect.ts'

/** Requests until one is refused; returns it and how many passed (bounded, so a broken limiter fails). */
async function drain(w: Warren, token: string, request = { method: 'GET' as const, url: '/v1/health' }, max = 5000) {
  for (let passed = 0; passed < max; passed++) {
    const res = await w.inject({ ...request, token })
    if (res.statusCode === 429) return { refused: res, passed }
    assert.ok(res.statusCode < 500, res.body)
  }
  throw new Error(`no 429 after ${max} requests`)
}

const retryAfter = (res: { headers: Record<string, unknown> }): number => {
  const v = String(res.headers['retry-after'])
  assert.match(v, /^\d+$/, `Retry-After is not whole seconds: ${v}`)
  return Number(v)
}

// A small general allowance (3 a minute: one request every 20 s) so that counts are exact.
forEachDialect('rate limits (3 a minute)', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_RATE_GENERAL_PER_MIN: '3', WARREN_RATE_SESSIONS_PER_MIN: '2' } })

  it('counts down whole requests, never rounding up, with reset the whole seconds until full', async () => {
    const t = await w().mint()
    for (let k = 1; k <= 3; k++) {
      const res = await w().inject({ method: 'GET', url: '/v1/health', token: t.token })
      assert.equal(res.statusCode, 200)
      const h = rateHeaders(res)
      assert.deepEqual({ limit: h.limit, remaining: h.remaining, resource: h.resource }, { limit: 3, remaining: 3 - k, resource: 'general' })
      // k requests short of full, at one request per 20 s: 20·k s (less a sliver refilled meanwhile).
      assert.ok(h.reset <= 20 * k && h.reset >= 20 * k - 1, `reset ${h.reset} after ${k} requests`)
    }
  })

  it('puts the headers on every authenticated answer: 2xx, 400, 403 and 404', async () => {
    const reader = await w().mint(undefined, ['sessions:read'])
    const forbidden = await w().inject({ method: 'GET', url: '/v1/tokens', token: reader.token })
    expectError(forbidden, 403, 'permission_denied')
    assert.deepEqual(rateHeaders(forbidden).remaining, 2)
    const full = await w().mint()
    const missing = await w().inject({ method: 'DELETE', url: '/v1/tokens/tok_never_issued', token: full.token })
    expectError(missing, 404, 'not_found')
    assert.equal(rateHeaders(missing).remaining, 2)
    const invalid = await w().inject({ method: 'GET', url: '/v1/tokens?limit=0', token: full.token })
    expectError(invalid, 400, 'invalid_request')
    assert.equal(rateHeaders(invalid).remaining, 1)
    const ok = await w().inject({ method: 'GET', url: '/v1/tokens', token: full.token })
    assert.equal(rateHeaders(ok).remaining, 0)
    assert.equal(rateHeaders(ok).resource, 'general')
  })

  it('refuses past the allowance with 429 rate_limit_exceeded, Retry-After and the headers, charging nothing', async () => {
    const t = await w().mint()
    const { refused, passed } = await drain(w(), t.token)
    assert.equal(passed, 3)
    expectError(refused, 429, 'rate_limit_exceeded')
    const first = retryAfter(refused)
    assert.ok(first >= 1 && first <= 20, `Retry-After ${first}`)
    const h = rateHeaders(refused)
    assert.deepEqual({ limit: h.limit, remaining: h.remaining, resource: h.resource }, { limit: 3, remaining: 0, resource: 'general' })
    assert.ok(h.reset >= 40 && h.reset <= 60, `reset ${h.reset}`)
    // Refused requests take nothing: remaining never goes below 0 and the wait never grows.
    for (let i = 0; i < 5; i++) {
      const again = await w().inject({ method: 'GET', url: '/v1/health', token: t.token })
      expectError(again, 429, 'rate_limit_exceeded')
      assert.equal(rateHeaders(again).remaining, 0)
      assert.ok(retryAfter(again) <= first, 'Retry-After grew: refused requests were charged')
    }
  })

  it('does not act on a refused request', async () => {
    const t = await w().mint()
    await drain(w(), t.token)
    const mint = await w().inject({ method: 'POST', url: '/v1/tokens', token: t.token, payload: { name: 'refused', scopes: ['sessions:read'], expires_in_days: 7 } })
    expectError(mint, 429, 'rate_limit_exceeded')
    const row = await w().store.db.selectFrom('tokens').select('id').where('name', '=', 'refused').executeTakeFirst()
    assert.equal(row, undefined, 'a rate-limited mint created a token')
  })

  it('keeps one allowance per token: another token, even of the same organization, is unaffected', async () => {
    const org = `rl-${Math.random().toString(36).slice(2)}`
    const a = await w().mint(org)
    const b = await w().mint(org)
    await drain(w(), a.token)
    const res = await w().inject({ method: 'GET', url: '/v1/health', token: b.token })
    assert.equal(res.statusCode, 200)
    assert.equal(rateHeaders(res).remaining, 2)
    expectError(await w().inject({ method: 'GET', url: '/v1/health', token: a.token }), 429, 'rate_limit_exceeded')
  })

  it('reports remaining as the floor of a fractional allowance', async (ctx) => {
    // Only PostgreSQL keeps buckets in the store (shared by processes), where a test can set one.
    if (dialect !== 'postgres') return ctx.skip('SQLite keeps rate buckets in process memory; the exact countdown above covers it')
    const t = await w().mint()
    assert.equal((await w().inject({ method: 'GET', url: '/v1/health', token: t.token })).statusCode, 200)
    // Put the bucket at 2.9 requests: after one more it holds 1.9, which is 1 whole request.
    await w().store.db.updateTable('rate_buckets').set({ tokens: 2.9, updated_at: Date.now() }).where('token_id', '=', t.id).where('bucket', '=', 'general').execute()
    const h = rateHeaders(await w().inject({ method: 'GET', url: '/v1/health', token: t.token }))
    assert.equal(h.remaining, 1)
    // 1.1 requests short at one per 20 s: 22 s, in whole seconds rounded up.
    assert.ok(h.reset === 22 || h.reset === 21, `reset ${h.reset}`)
  })

  it('keeps the sessions bucket apart from the general one', async () => {
    const tok = await w().mint()
    await drain(w(), tok.token)
    // General is exhausted; creating a session draws on its own bucket (an invalid body still counts).
    const s1 = await w().inject({ method: 'POST', url: '/v1/sessions', token: tok.token, payload: { not_a_field: 1 } })
    expectError(s1, 400, 'invalid_request')
    const h1 = rateHeaders(s1)
    assert.deepEqual([h1.limit, h1.remaining, h1.resource], [2, 1, 'sessions'])
    const s2 = await w().inject({ method: 'POST', url: '/v1/sessions', token: tok.token, payload: { not_a_field: 1 } })
    assert.equal(rateHeaders(s2).remaining, 0)
    const s3 = await w().inject({ method: 'POST', url: '/v1/sessions', token: tok.token, payload: { not_a_field: 1 } })
    expectError(s3, 429, 'rate_limit_exceeded')
    assert.equal(rateHeaders(s3).resource, 'sessions')
    assert.ok(retryAfter(s3) >= 1)
    // The other way round: a token whose sessions bucket is empty still has its general allowance.
    const fresh = await w().mint()
    await drain(w(), fresh.token, { method: 'POST' as 'GET', url: '/v1/sessions' })
    const h = await w().inject({ method: 'GET', url: '/v1/health', token: fresh.token })
    assert.equal(h.statusCode, 200)
    const hh = rateHeaders(h)
    assert.deepEqual([hh.limit, hh.remaining, hh.resource], [3, 2, 'general'])
    // Reading sessions is a general call, not a sessions one.
    const list = await w().inject({ method: 'GET', url: '/v1/sessions', token: fresh.token })
    assert.equal(rateHeaders(list).resource, 'general')
  })
})

// One request a second: a refusal's Retry-After is 1, and a debt of ten refusals would be ten seconds.
forEachDialect('rate limits (refill)', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_RATE_GENERAL_PER_MIN: '60' } })

  it('refills continuously, and refused requests do not delay the refill', async () => {
    const t = await w().mint()
    const { refused } = await drain(w(), t.token)
    expectError(refused, 429, 'rate_limit_exceeded')
    const wait = retryAfter(refused)
    assert.equal(wait, 1) // under a second away, in whole seconds: 1
    // Ten more attempts. Were refusals charged, the bucket would sit ten seconds deep afterwards.
    for (let i = 0; i < 10; i++) {
      const res = await w().inject({ method: 'GET', url: '/v1/health', token: t.token })
      assert.ok(res.statusCode === 429 || res.statusCode === 200, res.body) // 200 only if this machine is slow enough for a refill
      assert.ok(rateHeaders(res).remaining >= 0)
    }
    await sleep(wait * 1000 + 100) // the wait the first refusal announced
    const res = await w().inject({ method: 'GET', url: '/v1/health', token: t.token })
    assert.equal(res.statusCode, 200, res.body)
    const h = rateHeaders(res)
    assert.equal(h.limit, 60)
    assert.ok(h.remaining >= 0 && h.remaining < 60)
    assert.ok(h.reset >= 1 && h.reset <= 60)
  })
})

// The specification's own numbers when nothing is configured.
forEachDialect('rate limits (defaults)', (dialect) => {
  const w = useWarren(dialect)

  it('allows 120 general calls a minute', async () => {
    const t = await w().mint()
    const h = rateHeaders(await w().inject({ method: 'GET', url: '/v1/health', token: t.token }))
    assert.deepEqual(h, { limit: 120, remaining: 119, reset: 1, resource: 'general' })
    const started = Date.now()
    const { passed } = await drain(w(), t.token)
    // 119 left, plus whatever refilled meanwhile at two a second.
    const refilled = Math.ceil(((Date.now() - started) / 1000) * 2)
    assert.ok(passed >= 119 && passed <= 119 + refilled, `${passed} more passed`)
  })

  it('allows 10 session creations a minute, in the sessions bucket', async () => {
    const tok = await w().mint()
    const model = await w().inject({ method: 'POST', url: '/v1/model-credentials', token: tok.token, payload: { provider: 'openai', api_key: 'sk-test-1', models: ['gpt-test'] } })
    assert.equal(model.statusCode, 201, model.body)
    // The bucket refills one creation every 6 s: on a loaded machine some may come back while
    // the creations run, so each count allows for what the time taken can have refilled, no more.
    const started = Date.now()
    const refilled = () => Math.floor((Date.now() - started) / 6000)
    for (let k = 1; k <= 10; k++) {
      // Real creations and refused bodies alike draw on the bucket.
      const res = await w().inject({ method: 'POST', url: '/v1/sessions', token: tok.token, payload: k % 2 ? { title: `s${k}` } : { unknown_field: k } })
      if (k % 2) assert.equal(res.statusCode, 201, res.body)
      else expectError(res, 400, 'invalid_request')
      const h = rateHeaders(res)
      assert.deepEqual({ limit: h.limit, resource: h.resource }, { limit: 10, resource: 'sessions' })
      assert.ok(h.remaining >= 10 - k && h.remaining <= 10 - k + refilled(), `remaining ${h.remaining} after ${k} creations`)
    }
    let extra = 0
    let refused = await w().inject({ method: 'POST', url: '/v1/sessions', token: tok.token, payload: {} })
    while (refused.statusCode === 201 && extra < refilled()) {
      extra++
      refused = await w().inject({ method: 'POST', url: '/v1/sessions', token: tok.token, payload: {} })
    }
    expectError(refused, 429, 'rate_limit_exceeded')
    assert.ok(retryAfter(refused) >= 1 && retryAfter(refused) <= 6)
    assert.equal(rateHeaders(refused).resource, 'sessions')
    const created = (await w().inject({ method: 'GET', url: '/v1/sessions', token: tok.token })).json().data
    assert.equal(created.length, 5 + extra, 'the refused creation made a session')
    // The general bucket was untouched by all of that: only the three general calls drew on it
    // (it may have refilled a little meanwhile; ten charges would have left it near 107).
    const general = rateHeaders(await w().inject({ method: 'GET', url: '/v1/health', token: tok.token }))
    assert.equal(general.resource, 'general')
    assert.ok(general.remaining >= 117 && general.remaining <= 119, `general remaining ${general.remaining}`)
  })
})
