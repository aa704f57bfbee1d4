import { it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError } from './expect.ts'
import { buildApp } from '../src/app.ts'
import { localBlobStore } from '../src/artifacts/blob-store.ts'
import { LostOwnership } from '../src/nodes/ownership.store.ts'

// Fail closed: a route says who may call it (a scope, any valid token, or anyone), or the service
// does not start; forgetting to say must not mean "any valid token".
forEachDialect('route access', (dialect) => {
  const w = useWarren(dialect)

  it('refuses to add a route that declares no scope, and adds one that declares a scope, any token, or public', async (t) => {
    const blobs = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-access-'))
    t.after(() => fs.rmSync(blobs, { recursive: true, force: true }))
    const { config, store, bus, box, workspaces, runner, node, metrics, provider } = w()
    const app = await buildApp({ config, store, bus, box, workspaces, runner, node, metrics, host: () => provider.report(), blobs: localBlobStore(blobs) })
    assert.throws(() => app.get('/v1/unscoped', async () => ({ leaked: true })), /GET \/v1\/unscoped declares no scope/)
    assert.throws(() => app.post('/v1/unscoped', { config: { idempotent: true } }, async () => ({})), /declares no scope/)
    app.get('/v1/scoped', { config: { scope: 'sessions:read' } }, async () => ({}))
    app.get('/v1/any-token', { config: { anyToken: true } }, async () => ({}))
    app.get('/v1/open', { config: { public: true } }, async () => ({}))
    await app.ready()
    assert.equal((await app.inject({ method: 'GET', url: '/v1/open' })).statusCode, 200)
    expectError(await app.inject({ method: 'GET', url: '/v1/any-token' }), 401, 'authentication_error')
    await app.close()
  })

  it("refuses a session's route that does not say whether it runs on the session's owner, and a route saying so that names no session", async (t) => {
    const blobs = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-access-'))
    t.after(() => fs.rmSync(blobs, { recursive: true, force: true }))
    const { config, store, bus, box, workspaces, runner, node, metrics, provider } = w()
    const app = await buildApp({ config, store, bus, box, workspaces, runner, node, metrics, host: () => provider.report(), blobs: localBlobStore(blobs) })
    assert.throws(
      () => app.post('/v1/sessions/:session_id/things', { config: { scope: 'sessions:write' } }, async () => ({})),
      /POST \/v1\/sessions\/:session_id\/things does not say whether it acts on the session's workspace: give it config.onOwnersNode/,
    )
    assert.throws(() => app.get('/v1/things', { config: { scope: 'sessions:read', onOwnersNode: true } }, async () => ({})), /GET \/v1\/things runs on a session's owner but names no session/)
    app.post('/v1/sessions/:session_id/local', { config: { scope: 'sessions:write', onOwnersNode: false } }, async () => ({}))
    app.post('/v1/sessions/:session_id/owned', { config: { scope: 'sessions:write', onOwnersNode: true } }, async () => ({}))
    app.post('/v1/sessions/:session_id/sometimes', { config: { scope: 'sessions:write', onOwnersNode: () => false } }, async () => ({}))
    app.get('/v1/things', { config: { scope: 'sessions:read' } }, async () => ({}))
    // A workspace refused on a node that does not own it (acquire's LostOwnership) is the
    // specification's 503, never an internal error.
    app.post('/v1/sessions/:session_id/elsewhere', { config: { scope: 'sessions:write', onOwnersNode: false } }, async () => {
      throw new LostOwnership('ses_x', 'node_other')
    })
    await app.ready()
    const m = await w().mint()
    const refused = await app.inject({ method: 'POST', url: '/v1/sessions/ses_x/elsewhere', headers: { authorization: `Bearer ${m.token}` } })
    assert.match(expectError(refused, 503, 'sandbox_unavailable').message, /runs on node node_other, which cannot be reached from here now; retry shortly/)
    await app.close()
  })

  it('serves GET /v1/health to a valid token whatever its scopes, and nothing else without the scope', async () => {
    const m = await w().mint(undefined, [])
    const health = await w().inject({ method: 'GET', url: '/v1/health', token: m.token })
    assert.equal(health.statusCode, 200, health.body)
    assert.deepEqual(health.json().scopes, [])
    assert.match(expectError(await w().inject({ method: 'GET', url: '/v1/sessions', token: m.token }), 403, 'permission_denied').message, /sessions:read/)
    expectError(await w().inject({ method: 'GET', url: '/v1/health', token: null }), 401, 'authentication_error')
  })
})
