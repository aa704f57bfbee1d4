import { it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError, listTokenIds } from './expect.ts'
import { SCOPES } from '../src/tokens/scopes.ts'

forEachDialect('authentication', (dialect) => {
  const w = useWarren(dialect)

  const health = (authorization?: string) =>
    w().inject({ method: 'GET', url: '/v1/health', token: null, headers: authorization === undefined ? {} : { authorization } })

  it('refuses a missing token with 401 authentication_error', async () => {
    expectError(await health(), 401, 'authentication_error')
    expectError(await w().inject({ method: 'GET', url: '/v1/tokens', token: null }), 401, 'authentication_error')
    expectError(await w().inject({ method: 'POST', url: '/v1/tokens', token: null, payload: { scopes: ['sessions:read'], expires_in_days: 7 } }), 401, 'authentication_error')
  })

  it('refuses a malformed Authorization header with 401', async () => {
    for (const header of ['', 'Bearer', 'Bearer ', `Basic ${Buffer.from('a:b').toString('base64')}`, `Token ${w().token}`, `Bearer ${w().token} extra`, w().token]) {
      expectError(await health(header), 401, 'authentication_error')
    }
  })

  it('refuses an unrecognised token with 401, prefixed or not', async () => {
    for (const secret of ['svc_pat_doesnotexist', 'svc_pat_', 'ghp_abcdef', w().token.slice(0, -1), `${w().token}x`, w().token.replace('svc_pat_', 'svc_pak_')]) {
      expectError(await health(`Bearer ${secret}`), 401, 'authentication_error')
    }
    // The scheme name is case-insensitive, as HTTP says; the right token passes.
    assert.equal((await health(`bearer ${w().token}`)).statusCode, 200)
    assert.equal((await health(`Bearer ${w().token}`)).statusCode, 200)
  })

  it('refuses an expired token with 401, a live one a millisecond later passes', async () => {
    const t = await w().mint(undefined, ['sessions:read'], 7)
    assert.equal((await health(`Bearer ${t.token}`)).statusCode, 200)
    await w().store.db.updateTable('tokens').set({ expires_at: Date.now() - 1 }).where('id', '=', t.id).execute()
    const e = expectError(await health(`Bearer ${t.token}`), 401, 'authentication_error')
    assert.match(e.message, /expired/)
    await w().store.db.updateTable('tokens').set({ expires_at: Date.now() + 60_000 }).where('id', '=', t.id).execute()
    assert.equal((await health(`Bearer ${t.token}`)).statusCode, 200)
  })

  it('refuses a token revoked through DELETE /v1/tokens/{id} with 401, and a second revoke is 404', async () => {
    const minted = (await w().inject({ method: 'POST', url: '/v1/tokens', payload: { scopes: ['sessions:read'], expires_in_days: 7 } })).json()
    assert.equal((await health(`Bearer ${minted.token}`)).statusCode, 200)
    const del = await w().inject({ method: 'DELETE', url: `/v1/tokens/${minted.id}` })
    assert.equal(del.statusCode, 200, del.body)
    assert.deepEqual(del.json(), { object: 'token.deleted', id: minted.id, deleted: true })
    const e = expectError(await health(`Bearer ${minted.token}`), 401, 'authentication_error')
    assert.match(e.message, /revoked/)
    expectError(await w().inject({ method: 'DELETE', url: `/v1/tokens/${minted.id}` }), 404, 'not_found')
    assert.ok(!(await listTokenIds(w())).includes(minted.id), 'a revoked token is still listed')
    // The caller's own token is unaffected.
    assert.equal((await w().inject({ method: 'GET', url: '/v1/health' })).statusCode, 200)
  })

  it('lets a token revoke itself, after which it is refused', async () => {
    const self = await w().mint(undefined, ['tokens:write'])
    const del = await w().inject({ method: 'DELETE', url: `/v1/tokens/${self.id}`, token: self.token })
    assert.equal(del.statusCode, 200, del.body)
    expectError(await w().inject({ method: 'GET', url: '/v1/tokens', token: self.token }), 401, 'authentication_error')
  })

  it('refuses a valid token without the scope with 403 naming the scope, before looking for the object', async () => {
    const reader = await w().mint(undefined, ['sessions:read'])
    const list = await w().inject({ method: 'GET', url: '/v1/tokens', token: reader.token })
    assert.match(expectError(list, 403, 'permission_denied').message, /tokens:write/)
    const mint = await w().inject({ method: 'POST', url: '/v1/tokens', token: reader.token, payload: { scopes: ['sessions:read'], expires_in_days: 7 } })
    assert.match(expectError(mint, 403, 'permission_denied').message, /tokens:write/)
    const del = await w().inject({ method: 'DELETE', url: '/v1/tokens/tok_never_issued', token: reader.token })
    assert.match(expectError(del, 403, 'permission_denied').message, /tokens:write/)
    // Health needs no particular scope and reports exactly the token's own.
    const h = await w().inject({ method: 'GET', url: '/v1/health', token: reader.token })
    assert.equal(h.statusCode, 200)
    const { node, ...rest } = h.json()
    assert.deepEqual(rest, { object: 'health', status: 'ok', org_id: reader.orgId, token_id: reader.id, scopes: ['sessions:read'] })
    // The node that answered, and its peers (itself live among them), with no address shown.
    assert.equal(node.id, w().node.id)
    assert.deepEqual(Object.keys(node.peers.find((p: { id: string }) => p.id === node.id)).sort(), ['heartbeat_at', 'id', 'live', 'started_at'])
    assert.equal(node.peers.find((p: { id: string }) => p.id === node.id).live, true)
    // What the start-up report found for workspaces on an image: this host (root, Linux ≥ 5.19) can do both.
    if (process.getuid?.() === 0) assert.deepEqual(node.images, { overlay: true, uid_ranges: true, root_ranges: 0 })
  })

  it('mints a token carrying exactly the asked scopes, never one the caller lacks', async () => {
    // 90 days: a token lives no longer than the one that mints it.
    const minter = await w().mint(undefined, ['tokens:write', 'sessions:read', 'sessions:write'], 90)
    const before = await listTokenIds(w(), minter.token)
    const over = await w().inject({ method: 'POST', url: '/v1/tokens', token: minter.token, payload: { scopes: ['sessions:read', 'agents:write'], expires_in_days: 7 } })
    const e = expectError(over, 403, 'permission_denied')
    assert.match(e.message, /agents:write/)
    assert.doesNotMatch(e.message, /sessions:read/)
    assert.deepEqual(await listTokenIds(w(), minter.token), before, 'a refused mint created a token')

    const ok = await w().inject({ method: 'POST', url: '/v1/tokens', token: minter.token, payload: { name: 'ci', scopes: ['sessions:read'], expires_in_days: 30 } })
    assert.equal(ok.statusCode, 201, ok.body)
    const t = ok.json()
    assert.deepEqual(Object.keys(t).sort(), ['created_at', 'expires_at', 'id', 'name', 'object', 'org_id', 'scopes', 'token'])
    assert.ok(t.token.startsWith('svc_pat_'))
    assert.ok(t.token.length > 'svc_pat_'.length + 20, 'the secret is too short to be unguessable')
    assert.equal(t.org_id, minter.orgId)
    assert.equal(t.name, 'ci')
    assert.deepEqual(t.scopes, ['sessions:read'])
    assert.equal(t.expires_at - t.created_at, 30 * 86_400_000)
    const h = (await health(`Bearer ${t.token}`)).json()
    assert.deepEqual(h.scopes, ['sessions:read'])
    assert.equal(h.org_id, minter.orgId)
    // The minted token is no stronger than what it got: it cannot list tokens.
    expectError(await w().inject({ method: 'GET', url: '/v1/tokens', token: t.token }), 403, 'permission_denied')
  })

  it('mints only for 7, 30 or 90 days and only known, non-empty, distinct scopes', async () => {
    // 90 days is for the CLI's tokens: one minted over HTTP lives no longer than its minter (tokens.lineage.test.ts).
    const minter = await w().mint(undefined, ['tokens:write', 'sessions:read'], 90)
    for (const days of [7, 30]) {
      const res = await w().inject({ method: 'POST', url: '/v1/tokens', token: minter.token, payload: { scopes: ['sessions:read'], expires_in_days: days } })
      assert.equal(res.statusCode, 201, res.body)
      assert.equal(res.json().expires_at - res.json().created_at, days * 86_400_000)
    }
    const bad: [object, RegExp][] = [
      [{ scopes: ['sessions:read'], expires_in_days: 8 }, /expires_in_days/],
      [{ scopes: ['sessions:read'], expires_in_days: '7' }, /expires_in_days/],
      [{ scopes: ['sessions:read'] }, /expires_in_days/],
      [{ scopes: [], expires_in_days: 7 }, /scopes/],
      [{ scopes: ['root'], expires_in_days: 7 }, /scopes/],
      [{ scopes: ['sessions:read', 'sessions:read'], expires_in_days: 7 }, /scopes/],
      [{ expires_in_days: 7 }, /scopes/],
    ]
    for (const [payload, message] of bad) {
      const res = await w().inject({ method: 'POST', url: '/v1/tokens', payload })
      assert.match(expectError(res, 400, 'invalid_request').message, message, JSON.stringify(payload))
    }
  })

  it('gives the full-scope token every documented scope', async () => {
    const h = (await w().inject({ method: 'GET', url: '/v1/health' })).json()
    assert.deepEqual([...h.scopes].sort(), [...SCOPES].sort())
  })

  it("hides another organization's token: 404 on DELETE, shaped exactly like a never-issued id", async () => {
    const a = await w().mint('org-a-' + Math.random().toString(36).slice(2))
    const b = await w().mint('org-b-' + Math.random().toString(36).slice(2))
    const foreign = expectError(await w().inject({ method: 'DELETE', url: `/v1/tokens/${a.id}`, token: b.token }), 404, 'not_found')
    // A never-issued id of the same length and shape.
    const ghostId = a.id.slice(0, 4) + 'z'.repeat(a.id.length - 4)
    const ghost = expectError(await w().inject({ method: 'DELETE', url: `/v1/tokens/${ghostId}`, token: b.token }), 404, 'not_found')
    assert.equal(foreign.message.replace(a.id, '<id>'), ghost.message.replace(ghostId, '<id>'))
    // And it did nothing: A's token still works and B's listing never shows it.
    assert.equal((await health(`Bearer ${a.token}`)).statusCode, 200)
    assert.ok(!(await listTokenIds(w(), b.token)).includes(a.id))
    assert.ok((await listTokenIds(w(), a.token)).includes(a.id))
  })
})
