import { it } from 'node:test'
import assert from 'node:assert/strict'
import { errorOf, forEachDialect, useWarren } from './harness.ts'

forEachDialect('tokens and authentication', (dialect) => {
  const w = useWarren(dialect)

  it('health reports the calling token and its scopes', async () => {
    const res = await w().inject({ method: 'GET', url: '/v1/health' })
    assert.equal(res.statusCode, 200)
    const body = res.json()
    assert.equal(body.object, 'health')
    assert.equal(body.org_id, w().orgId)
    assert.ok(body.scopes.includes('sessions:read'))
  })

  it('refuses a missing token with 401 in the error shape', async () => {
    const res = await w().inject({ method: 'GET', url: '/v1/health', token: null })
    assert.equal(res.statusCode, 401)
    assert.equal(errorOf(res).code, 'authentication_error')
  })
})
