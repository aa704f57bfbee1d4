import { before, it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError } from './expect.ts'
import { openStore } from '../src/db/database.ts'
import { markedCache } from '../src/db/marked-cache.ts'
import { connectModel } from './fixtures.ts'

/**
 * GET /v1/sessions/{id} reuses a session once read while nothing has been written to the store
 * (SQLite). These prove the reuse never outlives a change, this process's or another's.
 */
forEachDialect('session reads reused between requests', (dialect) => {
  const w = useWarren(dialect)
  const otherProcess = () => openStore({ dataDir: w().dataDir, databaseUrl: w().config.databaseUrl, pgSchema: w().pgSchema })
  const get = (id: string) => w().inject({ method: 'GET', url: `/v1/sessions/${id}` })
  before(async () => {
    await connectModel(w())
  })

  it('shows at once a title another process changed, and a deletion by another process', async () => {
    const { id } = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: { title: 'before' } })).json()
    for (let i = 0; i < 3; i++) assert.equal((await get(id)).json().title, 'before')
    const other = await otherProcess()
    try {
      await other.db.updateTable('sessions').set({ title: 'after' }).where('id', '=', id).execute()
      assert.equal((await get(id)).json().title, 'after')
      await other.db.updateTable('sessions').set({ deleted_at: Date.now() }).where('id', '=', id).execute()
      expectError(await get(id), 404, 'not_found')
    } finally {
      await other.close()
    }
  })

  it('shows at once this process’s own changes, through the API and through the store', async () => {
    const { id } = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: { title: 'one', metadata: { a: '1' } } })).json()
    assert.equal((await get(id)).json().title, 'one')
    await w().inject({ method: 'POST', url: `/v1/sessions/${id}`, payload: { metadata: { a: '2' } } })
    assert.deepEqual((await get(id)).json().metadata, { a: '2' })
    await w().store.db.updateTable('sessions').set({ title: 'three' }).where('id', '=', id).execute()
    assert.equal((await get(id)).json().title, 'three')
  })

  it('never serves another organization’s session from what it kept', async () => {
    const { id } = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json()
    assert.equal((await get(id)).statusCode, 200)
    const stranger = await w().mint('org_stranger', ['sessions:read'])
    expectError(await w().inject({ method: 'GET', url: `/v1/sessions/${id}`, token: stranger.token }), 404, 'not_found')
  })
})

it('markedCache keeps nothing read before a write that another read already saw', async () => {
  // A read that began before a write and ends after it holds the old value: it must not be kept
  // under the new mark that a later read recorded meanwhile.
  let mark = 1
  let value = 'old'
  const store = { writeMark: () => String(mark) } as never
  const cache = markedCache<string>(store)
  let release!: () => void
  const slow = cache('k', async () => {
    const seen = value
    await new Promise<void>((r) => (release = r))
    return seen
  })
  mark = 2
  value = 'new'
  assert.equal(await cache('other', async () => 'x'), 'x')
  release()
  assert.equal(await slow, 'old')
  assert.equal(await cache('k', async () => value), 'new', 'a value read before the write was kept under the later mark')
})
