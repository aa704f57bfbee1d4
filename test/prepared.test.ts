import { it } from 'node:test'
import assert from 'node:assert/strict'
import { sql } from 'kysely'
import { prepared, preparedWrite } from '../src/db/prepared.ts'
import { forEachDialect, useWarren } from './harness.ts'

/** Made once for both dialects' suites: each dialect compiles and keeps its own text. */
const byId = prepared((db, id: string) => db.selectFrom('orgs').select('name').where('id', '=', id))

/**
 * Prepared statements are compiled once per dialect and run with each call's values: what they
 * read and write must be exactly what the same query built afresh reads and writes.
 */
forEachDialect('prepared statements', (dialect) => {
  const w = useWarren(dialect)
  const table = `prepared_${dialect}`
  // node:sqlite's rows have no prototype; the values are what is compared.
  const plain = (rows: unknown[]) => rows.map((r) => ({ ...(r as object) }))

  it('binds every call’s own values, numbers and nulls included, an argument used twice included', async () => {
    const db = w().store.db
    await sql`create table ${sql.table(table)} (id text primary key, n integer, note text)`.execute(db)
    // The same argument twice: the row's n is one more than the count of rows already there with that note.
    const insert = preparedWrite((db, id: string, note: string | null, n: number) =>
      db.insertInto(table as never).values({ id, note, n: sql`${n} + (select count(*) from ${sql.table(table)} where note = ${note})` } as never),
    )
    assert.equal(await insert(db, 'a', 'x', 1), 1)
    assert.equal(await insert(db, 'b', 'x', 10), 1)
    assert.equal(await insert(db, 'c', null, 5), 1)
    const byNote = prepared((db, note: string, min: number) =>
      db.selectFrom(table as never).select(['id', 'n'] as never).where('note' as never, '=', note as never).where('n' as never, '>=', min as never).orderBy('id' as never),
    )
    assert.deepEqual(plain(await byNote(db, 'x', 0)), [{ id: 'a', n: 1 }, { id: 'b', n: 11 }])
    assert.deepEqual(plain(await byNote(db, 'x', 5)), [{ id: 'b', n: 11 }])
    assert.deepEqual(plain(await byNote(db, 'y', 0)), [])
    const nulls = await db.selectFrom(table as never).select(['id', 'note'] as never).where('note' as never, 'is', null).execute()
    assert.deepEqual(plain(nulls), [{ id: 'c', note: null }])
    // Counted like the built statement: the rows it changed.
    const renote = preparedWrite((db, from: string, to: string) => db.updateTable(table as never).set({ note: to } as never).where('note' as never, '=', from as never))
    assert.equal(await renote(db, 'x', 'z'), 2)
    assert.equal(await renote(db, 'x', 'z'), 0)
    // Inside a transaction, on its connection.
    await db.transaction().execute(async (trx) => {
      assert.equal(await renote(trx, 'z', 'w'), 2)
      assert.deepEqual(plain(await byNote(trx, 'w', 0)), [{ id: 'a', n: 1 }, { id: 'b', n: 11 }])
    })
  })

  it('keeps one compiled statement per dialect', async () => {
    const { orgId } = await w().mint()
    const [org] = await byId(w().store.db, orgId)
    assert.ok(org?.name, `the ${dialect} store answered its own statement`)
  })

  it('refuses an argument that is not bound as a value', async () => {
    const db = w().store.db
    // A column name is part of the statement's text: it cannot change from one call to the next.
    const byColumn = prepared((db, column: string) => db.selectFrom(table as never).select(sql.ref(column).as('v') as never))
    await assert.rejects(byColumn(db, 'id'), /every argument must be a value parameter/)
    const unused = prepared((db, _id: string) => db.selectFrom(table as never).select('id' as never))
    await assert.rejects(unused(db, 'a'), /every argument must be a value parameter/)
    // Made into another value on its way in: it would be bound as the placeholder for ever.
    const prefixed = prepared((db, id: string) => db.selectFrom(table as never).select('id' as never).where('id' as never, 'like', `${id}%` as never))
    await assert.rejects(prefixed(db, 'a'), /every argument must be a value parameter/)
    // With returning, SQLite answers rows and no count: that is prepared()'s.
    const returning = preparedWrite((db, id: string) => db.deleteFrom(table as never).where('id' as never, '=', id as never).returning('id' as never))
    await assert.rejects(returning(db, 'nothing'), /with returning is prepared/)
  })
})
