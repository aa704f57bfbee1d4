// A token minted over HTTP is bounded by the token that minted it: never more scopes, never a
// longer life, and it goes when that one is revoked (with everything minted under it), on every
// node at once, however recently it was read.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { randomText } from '../src/shared/ids.ts'
import { expectError } from './expect.ts'
import { sql } from 'kysely'
import { openStore } from '../src/db/database.ts'
import { revokeToken } from '../src/tokens/tokens.store.ts'

forEachDialect('tokens minted by tokens', (dialect) => {
  const w = useWarren(dialect)
  const health = (token: string) => w().inject({ method: 'GET', url: '/v1/health', token })
  const mintWith = (token: string, days: number, scopes = ['tokens:write', 'sessions:read']) => w().inject({ method: 'POST', url: '/v1/tokens', token, payload: { scopes, expires_in_days: days } })
  /** A token minted over HTTP by `parent`: its id and secret. */
  async function child(parent: string, days: number): Promise<{ id: string; token: string; expires_at: number }> {
    const res = await mintWith(parent, days)
    assert.equal(res.statusCode, 201, res.body)
    return res.json()
  }
  /** The ids of the unrevoked tokens of the organization of `token`. */
  const listed = async (token: string) => ((await w().inject({ method: 'GET', url: '/v1/tokens?limit=100', token })).json().data as { id: string }[]).map((t) => t.id)

  it('refuses a lifetime past the calling token’s with 400 naming expires_in_days, minting nothing; a shorter one is minted', async () => {
    const week = await w().mint(undefined, ['tokens:write', 'sessions:read'], 7)
    const before = await listed(week.token)
    for (const days of [7, 30, 90]) {
      const e = expectError(await mintWith(week.token, days), 400, 'invalid_request')
      assert.match(e.message, new RegExp(`expires_in_days ${days} would outlive the calling token`))
    }
    assert.deepEqual(await listed(week.token), before, 'a refused mint created a token')

    const quarter = await w().mint(undefined, ['tokens:write', 'sessions:read'], 90)
    const month = await child(quarter.token, 30)
    const parentExpiry = (await w().store.db.selectFrom('tokens').select('expires_at').where('id', '=', quarter.id).executeTakeFirstOrThrow()).expires_at
    assert.ok(month.expires_at <= Number(parentExpiry))
    expectError(await mintWith(quarter.token, 90), 400, 'invalid_request')
    // The child bounds its own children in turn, in scopes as in life.
    expectError(await mintWith(month.token, 30), 400, 'invalid_request')
    assert.match(expectError(await mintWith(month.token, 7, ['sessions:write']), 403, 'permission_denied').message, /sessions:write/)
    assert.equal((await mintWith(month.token, 7)).statusCode, 201)
  })

  it('revoking a token revokes the tokens it minted and theirs, and no other', async () => {
    const org = `org-${randomText(8)}`
    const root = await w().mint(org, ['tokens:write', 'sessions:read'], 90)
    const sibling = await w().mint(org, ['tokens:write', 'sessions:read'], 90)
    const kid = await child(root.token, 30)
    const grandkid = await child(kid.token, 7)
    const cousin = await child(sibling.token, 30)
    for (const t of [kid, grandkid, cousin]) assert.equal((await health(t.token)).statusCode, 200)

    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/tokens/${root.id}`, token: sibling.token })).statusCode, 200)
    for (const t of [kid, grandkid]) assert.match(expectError(await health(t.token), 401, 'authentication_error').message, /revoked/)
    assert.equal((await health(cousin.token)).statusCode, 200)
    assert.equal((await health(sibling.token)).statusCode, 200)
    const left = await listed(sibling.token)
    for (const id of [root.id, kid.id, grandkid.id]) assert.ok(!left.includes(id), `${id} is still listed`)
    assert.ok(left.includes(cousin.id))
  })

  it('revoking again finishes a revocation cut short: tokens under a token revoked before are revoked too', async () => {
    const root = await w().mint(undefined, ['tokens:write', 'sessions:read'], 90)
    const kid = await child(root.token, 30)
    const grandkid = await child(kid.token, 7)
    // What a revocation stopped after its first generations leaves (the process died, the store
    // went away): the root and its child revoked, the grandchild still standing.
    await w().store.db.updateTable('tokens').set({ revoked_at: Date.now() }).where('id', 'in', [root.id, kid.id]).execute()
    assert.equal((await health(grandkid.token)).statusCode, 200)
    // Revoking the root again (warren tokens revoke) walks the whole tree, not only what was still live.
    await revokeToken(w().store.db, root.id)
    assert.match(expectError(await health(grandkid.token), 401, 'authentication_error').message, /revoked/)
  })

  it('revokes a token that minted more tokens than one statement can name (SQLite takes 32,766 values, PostgreSQL 65,535)', async () => {
    const root = await w().mint(undefined, ['tokens:write', 'sessions:read'], 90)
    const kid = await child(root.token, 30)
    // 70,000 more tokens minted by the root, written at once (minting them over HTTP takes hours).
    const many = 70_000
    const row = await w().store.db.selectFrom('tokens').selectAll().where('id', '=', kid.id).executeTakeFirstOrThrow()
    await sql`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${many})
      INSERT INTO tokens (id, org_id, name, hash, scopes, created_at, expires_at, revoked_at, parent_id)
      SELECT ${`${kid.id}_`} || i, ${row.org_id}, NULL, ${`${row.hash}_`} || i, ${row.scopes}, ${row.created_at}, ${row.expires_at}, NULL, ${root.id} FROM n`.execute(w().store.db)
    const grandkid = await child(kid.token, 7)
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/tokens/${root.id}`, token: grandkid.token })).statusCode, 200)
    const standing = await w().store.db.selectFrom('tokens').select((eb) => eb.fn.countAll<number>().as('n')).where('parent_id', '=', root.id).where('revoked_at', 'is', null).executeTakeFirstOrThrow()
    assert.equal(Number(standing.n), 0)
    assert.equal((await health(grandkid.token)).statusCode, 401)
  })

  it('a parent revoked by another process (the CLI, another node) refuses its children at once, though they were just read', async () => {
    const root = await w().mint(undefined, ['tokens:write', 'sessions:read'], 90)
    const kid = await child(root.token, 30)
    const grandkid = await child(kid.token, 7)
    for (let i = 0; i < 3; i++) assert.equal((await health(grandkid.token)).statusCode, 200)
    const other = await openStore({ dataDir: w().dataDir, databaseUrl: w().config.databaseUrl, pgSchema: w().pgSchema })
    try {
      await revokeToken(other.db, root.id)
    } finally {
      await other.close()
    }
    for (const t of [kid, grandkid]) assert.match(expectError(await health(t.token), 401, 'authentication_error').message, /revoked/)
  })
})
