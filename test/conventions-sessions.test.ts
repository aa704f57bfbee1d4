import { before, it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError } from './expect.ts'

// The conventions where only session creation can show them: nested bodies and its larger size limit.
forEachDialect('conventions on session creation', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_RATE_SESSIONS_PER_MIN: '1000' } })
  before(async () => {
    const res = await w().inject({ method: 'POST', url: '/v1/model-credentials', payload: { provider: 'openai', api_key: 'sk-test-1', models: ['gpt-test'] } })
    assert.ok(res.statusCode === 201 || res.statusCode === 200, res.body)
  })

  const sessionCount = async () => (await w().inject({ method: 'GET', url: '/v1/sessions?limit=100' })).json().data.length as number

  it('refuses an unknown field nested in the body, naming its full path, and creates nothing', async () => {
    const cases: [object, string][] = [
      [{ agent: { model: 'gpt-test', temperature: 1 } }, 'agent.temperature'],
      [{ environment: { repo: { full_name: 'a/b', depth: 1 } } }, 'environment.repo.depth'],
      [{ environment: { files: [{ path: 'a.txt', content: 'eA==', owner: 'root' }] } }, 'environment.files[0].owner'],
      [{ agent: { permission_rules: [{ decision: 'allow', tool: 'bash', why: 'x' }] } }, 'agent.permission_rules[0].why'],
    ]
    for (const [payload, path] of cases) {
      const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload })
      const e = expectError(res, 400, 'invalid_request')
      assert.ok(e.message.includes(path), `${JSON.stringify(payload)}: message does not name ${path}: ${e.message}`)
    }
    assert.equal(await sessionCount(), 0)
  })

  it('reads a session body over 1 MiB (its limit is 16 MiB) and refuses one over 16 MiB with 400', async () => {
    const content = Buffer.alloc(1536 * 1024, 'a').toString('base64') // 1.5 MiB decoded, 2 MiB as sent
    const ok = await w().inject({ method: 'POST', url: '/v1/sessions', payload: { environment: { files: [{ path: 'big.txt', content }] } } })
    assert.equal(ok.statusCode, 201, ok.body.slice(0, 300))
    const before = await sessionCount()
    const huge = JSON.stringify({ title: 'x'.repeat(16 * 1024 * 1024 + 1) })
    const res = await w().inject({ method: 'POST', url: '/v1/sessions', headers: { 'content-type': 'application/json' }, payload: huge })
    assert.notEqual(res.statusCode, 413)
    expectError(res, 400, 'invalid_request')
    assert.equal(await sessionCount(), before)
  })

  it('refuses unknown query parameters on the session list by name', async () => {
    const res = await w().inject({ method: 'GET', url: '/v1/sessions?colour=red' })
    assert.match(expectError(res, 400, 'invalid_request').message, /"colour"/)
    // order exists on sessions, as on every collection but agents, webhooks, model connections and profiles.
    assert.equal((await w().inject({ method: 'GET', url: '/v1/sessions?order=asc' })).statusCode, 200)
    expectError(await w().inject({ method: 'GET', url: '/v1/sessions?order=sideways' }), 400, 'invalid_request')
  })

  it('names every allowed value when it refuses one outside a fixed set, in bodies and query strings', async () => {
    const cases: [{ method: 'GET' | 'POST'; url: string; payload?: object }, string, string[]][] = [
      [{ method: 'POST', url: '/v1/model-credentials', payload: { provider: 'opneai', api_key: 'sk-x', models: ['m'] } }, '"provider"', ['openai', 'anthropic', 'openai_compatible']],
      [{ method: 'POST', url: '/v1/sessions', payload: { agent: { approval_mode: 'never' } } }, '"agent.approval_mode"', ['auto', 'ask', 'read_only']],
      [{ method: 'POST', url: '/v1/sessions', payload: { agent: { permission_rules: [{ decision: 'maybe' }] } } }, '"agent.permission_rules[0].decision"', ['allow', 'deny', 'ask']],
      [{ method: 'GET', url: '/v1/sessions?status=asleep' }, 'query parameter "status"', ['idle', 'working', 'requires_action', 'failed']],
    ]
    for (const [req, label, allowed] of cases) {
      const e = expectError(await w().inject(req), 400, 'invalid_request')
      assert.equal(e.message, `${label} must be one of ${allowed.map((v) => `"${v}"`).join(', ')}.`, `${req.url}`)
    }
  })

  it('creates a session from no body at all (no Content-Type either): every field is optional', async () => {
    const res = await w().inject({ method: 'POST', url: '/v1/sessions' })
    assert.equal(res.statusCode, 201, res.body)
    const s = res.json()
    assert.equal(s.object, 'session')
    assert.equal(s.agent.model, 'gpt-test', 'the default model connection runs it')
    assert.deepEqual(s.metadata, {})
    // An empty body that claims to be JSON is a different request: it is refused with the way out.
    const empty = await w().inject({ method: 'POST', url: '/v1/sessions', headers: { 'content-type': 'application/json' }, payload: '' })
    assert.match(expectError(empty, 400, 'invalid_request').message, /send \{\} or no Content-Type/)
  })
})
