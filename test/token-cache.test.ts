import { it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError } from './expect.ts'
import { openStore } from '../src/db/database.ts'
import { insertToken, revokeToken } from '../src/tokens/tokens.store.ts'

/**
 * A token once read is reused while nothing has been written to the store (SQLite). These
 * prove the reuse never outlives a change: not this process's, not another process's.
 */
forEachDialect('token lookups reused between requests', (dialect) => {
  const w = useWarren(dialect)
  const health = (token: string) => w().inject({ method: 'GET', url: '/v1/health', token })
  /** A second connection to the same store, as the CLI (another process) opens one. */
  const otherProcess = () => openStore({ dataDir: w().dataDir, databaseUrl: w().config.databaseUrl, pgSchema: w().pgSchema })

  it('refuses at once a token that another process revoked, though it was just read', async () => {
    const t = await w().mint(undefined, ['sessions:read'])
    for (let i = 0; i < 3; i++) assert.equal((await health(t.token)).statusCode, 200)
    const other = await otherProcess()
    try {
      await revokeToken(other.db, t.id)
    } finally {
      await other.close()
    }
    assert.match(expectError(await health(t.token), 401, 'authentication_error').message, /revoked/)
  })

  it('refuses at once a token that this process revoked, and a token another process minted works at once', async () => {
    const t = await w().mint(undefined, ['sessions:read'])
    assert.equal((await health(t.token)).statusCode, 200)
    // Revoked here through the store itself, not through the API's route.
    await revokeToken(w().store.db, t.id)
    expectError(await health(t.token), 401, 'authentication_error')

    const unknown = 'svc_pat_minted_later_000000000000000000000'
    expectError(await health(unknown), 401, 'authentication_error')
    const other = await otherProcess()
    try {
      const { secret } = await insertToken(other.db, { orgId: w().orgId, name: null, scopes: ['sessions:read'], days: 7 })
      assert.equal((await health(secret)).statusCode, 200)
    } finally {
      await other.close()
    }
  })

  it('sees a changed scope list at once', async () => {
    const t = await w().mint(undefined, ['sessions:read'])
    assert.equal((await w().inject({ method: 'GET', url: '/v1/tokens', token: t.token })).statusCode, 403)
    await w().store.db.updateTable('tokens').set({ scopes: JSON.stringify(['sessions:read', 'tokens:write']) }).where('id', '=', t.id).execute()
    assert.equal((await w().inject({ method: 'GET', url: '/v1/tokens', token: t.token })).statusCode, 200)
  })
})
