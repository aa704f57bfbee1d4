import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { before, it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError, rateHeaders, sleep } from './expect.ts'
import { markedCache } from '../src/db/marked-cache.ts'
import { openStore } from '../src/db/database.ts'
import { ensureOrg, insertToken } from '../src/tokens/tokens.store.ts'
import { connectModel } from './fixtures.ts'

/**
 * The authenticated GET path answers from memory where it can (SQLite: a token and a session kept
 * until the store changes, the session's text serialized once). These prove that such an answer
 * is the answer the store would give, headers included, and that nothing decided once is reused.
 */
forEachDialect('the authenticated GET path', (dialect) => {
  const w = useWarren(dialect)
  const get = (id: string, token?: string) => w().inject({ method: 'GET', url: `/v1/sessions/${id}`, token })
  before(async () => {
    await connectModel(w())
  })

  it('answers a session kept in memory byte for byte as one read from the store, and as the list shapes it', async () => {
    const { id } = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: { title: 'kept', metadata: { k: 'v' } } })).json()
    const answers = [await get(id), await get(id), await get(id)]
    for (const res of answers) {
      assert.equal(res.statusCode, 200, res.body)
      assert.equal(res.headers['content-type'], 'application/json; charset=utf-8')
      assert.match(String(res.headers['x-request-id']), /^req_/)
      assert.equal(rateHeaders(res).resource, 'general')
    }
    assert.equal(new Set(answers.map((r) => r.headers['x-request-id'])).size, 3, 'a request id was reused')
    // The list is serialized by Fastify from the same schema: the same text, field for field.
    const listed = (await w().inject({ method: 'GET', url: '/v1/sessions' })).json().data.find((s: { id: string }) => s.id === id)
    for (const res of answers) assert.equal(res.body, JSON.stringify(listed))
  })

  it('sends the new text of a changed session, not the text kept for the old one', async () => {
    const { id } = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: { title: 'old' } })).json()
    assert.equal((await get(id)).json().title, 'old')
    assert.equal((await get(id)).json().title, 'old')
    await w().inject({ method: 'POST', url: `/v1/sessions/${id}`, payload: { title: 'new' } })
    assert.equal((await get(id)).json().title, 'new')
    await w().store.db.updateTable('sessions').set({ title: 'newer' }).where('id', '=', id).execute()
    const res = await get(id)
    assert.equal(res.json().title, 'newer')
    assert.doesNotMatch(res.body, /"old"|"new"/)
  })

  it('refuses a kept token the moment it expires, with nothing written meanwhile', async () => {
    const { id } = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json()
    const { record, secret } = await insertToken(w().store.db, { orgId: w().orgId, name: null, scopes: ['sessions:read'], days: 7 })
    const expiresAt = Date.now() + 1500
    await w().store.db.updateTable('tokens').set({ expires_at: expiresAt }).where('id', '=', record.id).execute()
    assert.equal((await get(id, secret)).statusCode, 200)
    assert.equal((await get(id, secret)).statusCode, 200)
    while (Date.now() <= expiresAt) await sleep(100)
    assert.match(expectError(await get(id, secret), 401, 'authentication_error').message, /expired/)
  })

  it('checks the scope of a kept token on every request, with the rate headers on the 403', async () => {
    const t = await w().mint(undefined, ['agents:read'])
    const { id } = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json()
    assert.equal((await w().inject({ method: 'GET', url: '/v1/agents', token: t.token })).statusCode, 200)
    for (let i = 0; i < 2; i++) {
      const refused = await get(id, t.token)
      assert.match(expectError(refused, 403, 'permission_denied').message, /sessions:read/)
      assert.equal(rateHeaders(refused).resource, 'general')
    }
  })
})

it('markedCache.kept answers only what was read under the same mark, at once', async () => {
  let mark = 1
  const cache = markedCache<string>({ writeMark: () => String(mark) })
  assert.equal(cache.kept('k', '1'), undefined, 'nothing has been read yet')
  assert.equal(await cache('k', async () => 'v', '1'), 'v')
  assert.equal(cache.kept('k', '1'), 'v')
  assert.equal(cache.kept('other', '1'), undefined)
  mark = 2
  assert.equal(cache.kept('k', '2'), undefined, 'a value outlived a write')
  assert.equal(cache.kept('k', undefined), undefined, 'a value outlived a write (mark read by kept itself)')
  // Misses are never kept: an unknown key reads again.
  assert.equal(await cache('gone', async () => null, '2'), null)
  assert.equal(cache.kept('gone', '2'), undefined)
  // A store without marks (PostgreSQL) keeps nothing.
  const unmarked = markedCache<string>({})
  await unmarked('k', async () => 'v')
  assert.equal(unmarked.kept('k', undefined), undefined)
})

it('the SQLite write mark moves with every write, this connection’s or another’s, and not with a read', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-mark-'))
  const store = await openStore({ dataDir })
  try {
    const mark = store.writeMark!
    const start = mark()
    await store.db.selectFrom('orgs').selectAll().execute()
    assert.equal(mark(), start, 'a read moved the mark: nothing would ever be kept')
    await ensureOrg(store.db, 'marked')
    const afterInsert = mark()
    assert.notEqual(afterInsert, start, 'an insert left the mark')
    await store.db.updateTable('orgs').set({ name: 'marked-2' }).where('name', '=', 'marked').execute()
    const afterUpdate = mark()
    assert.notEqual(afterUpdate, afterInsert, 'an update left the mark')
    await store.db.transaction().execute(async (tx) => {
      await tx.deleteFrom('orgs').where('name', '=', 'marked-2').execute()
    })
    const afterDelete = mark()
    assert.notEqual(afterDelete, afterUpdate, 'a delete in a transaction left the mark')
    const other = await openStore({ dataDir })
    try {
      await ensureOrg(other.db, 'from-another-process')
    } finally {
      await other.close()
    }
    assert.notEqual(mark(), afterDelete, 'another connection’s commit left the mark')
  } finally {
    await store.close()
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
})
