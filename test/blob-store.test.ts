// The database blob store (PostgreSQL): what every node of a deployment reads artifact bytes and
// workspace snapshots from.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import { buffer } from 'node:stream/consumers'
import pg from 'pg'
import { openStore, type Store } from '../src/db/database.ts'
import { BlobTooLarge } from '../src/artifacts/blob-store.ts'
import { CHUNK_BYTES, databaseBlobStore } from '../src/artifacts/database-blob-store.ts'
import { randomText } from '../src/shared/ids.ts'
import { onPostgres, PG_URL } from './harness.ts'
import { waitFor } from './fixtures.ts'

/** A source that hands out `bytes` in 64 KiB pieces, each on its own tick. */
const trickle = (bytes: Buffer) =>
  Readable.from(
    (async function* () {
      for (let at = 0; at < bytes.length; at += 65536) {
        await new Promise((r) => setImmediate(r))
        yield bytes.subarray(at, at + 65536)
      }
    })(),
    { objectMode: false },
  )

const count = async (store: Store) => ({
  blobs: Number((await store.db.selectFrom('blobs').select((e) => e.fn.countAll().as('n')).executeTakeFirstOrThrow()).n),
  chunks: Number((await store.db.selectFrom('blob_chunks').select((e) => e.fn.countAll().as('n')).executeTakeFirstOrThrow()).n),
})

onPostgres('database blob store', () => {
  let store: Store
  const schema = `t_${randomText(12)}`
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-blobs-'))
  before(async () => {
    store = await openStore({ dataDir, databaseUrl: PG_URL, pgSchema: schema })
  })
  after(async () => {
    await store?.close()
    const c = new pg.Client({ connectionString: PG_URL })
    await c.connect()
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await c.end()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  it('stores a multi-chunk blob under its sha256 and streams it back whole', async () => {
    await store.db.deleteFrom('blobs').execute()
    await store.db.deleteFrom('blob_chunks').execute()
    const blobs = databaseBlobStore(store.db, 'artifacts')
    const bytes = randomBytes(2 * CHUNK_BYTES + 12345)
    const sha = createHash('sha256').update(bytes).digest('hex')
    assert.equal(await blobs.exists(sha), false)
    assert.equal(await blobs.open(sha), null)
    const stored = await blobs.put(trickle(bytes), 10 * CHUNK_BYTES)
    assert.deepEqual(stored, { key: sha, size: bytes.length, sha256: sha })
    assert.deepEqual(await count(store), { blobs: 1, chunks: 3 })
    assert.equal(await blobs.exists(sha), true)
    const back = await buffer((await blobs.open(sha))!)
    assert.ok(back.equals(bytes), 'the bytes read back are the bytes stored')
    // An empty blob is a blob too.
    const empty = await blobs.put(Readable.from([], { objectMode: false }), 10)
    assert.equal(empty.size, 0)
    assert.equal((await buffer((await blobs.open(empty.key))!)).length, 0)
    await blobs.delete(sha)
    assert.equal(await blobs.open(sha), null)
    assert.deepEqual(await count(store), { blobs: 1, chunks: 0 }, "the deleted blob's chunks are gone, the empty blob stays")
  })

  it('shows no part of a blob until the put is over, and keeps nothing of a refused one', async () => {
    await store.db.deleteFrom('blobs').execute()
    await store.db.deleteFrom('blob_chunks').execute()
    const blobs = databaseBlobStore(store.db, 'artifacts')
    // A put that has written two chunks and waits for more: nothing of it is visible elsewhere.
    let release!: () => void
    const held = new Promise<void>((r) => (release = r))
    let sent = 0
    const slow = Readable.from(
      (async function* () {
        for (let i = 0; i < 3; i++) {
          if (i === 2) await held
          sent++
          yield Buffer.alloc(CHUNK_BYTES, i + 1)
        }
      })(),
      { objectMode: false },
    )
    const putting = blobs.put(slow, 2 * CHUNK_BYTES + 10)
    await waitFor('two chunks handed over', async () => sent >= 2)
    await new Promise((r) => setTimeout(r, 200))
    assert.deepEqual(await count(store), { blobs: 0, chunks: 0 }, 'a put in progress shows nothing to other readers')
    release()
    await assert.rejects(putting, BlobTooLarge)
    assert.deepEqual(await count(store), { blobs: 0, chunks: 0 }, 'a refused put keeps no rows')
  })

  it('keeps one copy when the same bytes are put concurrently', async () => {
    await store.db.deleteFrom('blobs').execute()
    await store.db.deleteFrom('blob_chunks').execute()
    const blobs = databaseBlobStore(store.db, 'artifacts')
    const bytes = randomBytes(CHUNK_BYTES + 777)
    const results = await Promise.all([1, 2, 3, 4].map(() => blobs.put(trickle(bytes), 10 * CHUNK_BYTES)))
    assert.equal(new Set(results.map((r) => r.key)).size, 1)
    assert.deepEqual(await count(store), { blobs: 1, chunks: 2 }, 'one blob, one set of chunks')
    assert.ok((await buffer((await blobs.open(results[0]!.key))!)).equals(bytes))
  })

  it('keeps key spaces apart: deleting a snapshot blob leaves an artifact with the same bytes', async () => {
    const artifacts = databaseBlobStore(store.db, 'artifacts')
    const snapshots = databaseBlobStore(store.db, 'snapshots')
    const bytes = randomBytes(1000)
    const a = await artifacts.put(trickle(bytes), 10_000)
    const s = await snapshots.put(trickle(bytes), 10_000)
    assert.equal(a.key, s.key)
    await snapshots.delete(s.key)
    assert.equal(await snapshots.exists(s.key), false)
    assert.ok((await buffer((await artifacts.open(a.key))!)).equals(bytes))
    // Asked many at once, each space answers for its own: the snapshot's copy is gone, the artifact's is not.
    const other = (await artifacts.put(trickle(randomBytes(500)), 10_000)).key
    const absent = createHash('sha256').update('never stored').digest('hex')
    assert.deepEqual([...(await artifacts.existing([a.key, absent, other]))].sort(), [a.key, other].sort())
    assert.deepEqual([...(await snapshots.existing([a.key, absent, other]))], [])
  })

  it('puts and gets many small blobs in one call: each once, the ones stored before kept as they were', async () => {
    await store.db.deleteFrom('blobs').execute()
    await store.db.deleteFrom('blob_chunks').execute()
    const blobs = databaseBlobStore(store.db, 'contents')
    const before = await blobs.put(Readable.from([Buffer.from('stored before')], { objectMode: false }), 100)
    const big = randomBytes(CHUNK_BYTES + 10)
    const items = [Buffer.from('a'), Buffer.from('stored before'), big, Buffer.from('a'), Buffer.alloc(0)]
    await assert.rejects(blobs.putMany(items, CHUNK_BYTES), BlobTooLarge)
    assert.deepEqual(await count(store), { blobs: 1, chunks: 1 }, 'a refused call keeps nothing')
    const added = await blobs.putMany(items, 10 * CHUNK_BYTES)
    const key = (b: Buffer) => createHash('sha256').update(b).digest('hex')
    assert.deepEqual([...added].sort(), [key(Buffer.from('a')), key(big), key(Buffer.alloc(0))].sort())
    assert.ok((await buffer((await blobs.open(key(big)))!)).equals(big))
    assert.equal((await buffer((await blobs.open(before.key))!)).toString(), 'stored before')
    // 'stored before' 1 chunk, 'a' 1, big 2, empty 0: the duplicate's and the already stored one's chunks rolled back.
    assert.deepEqual(await count(store), { blobs: 4, chunks: 4 })
    assert.deepEqual([...(await blobs.putMany(items, 10 * CHUNK_BYTES))], [], 'all stored already: none added')
    // Read back many at once, a multi-chunk and an empty one included; one never stored is absent.
    const absent = key(Buffer.from('never stored'))
    const got = await blobs.getMany([key(big), key(Buffer.from('a')), key(Buffer.alloc(0)), absent])
    assert.deepEqual([...got.keys()].sort(), [key(big), key(Buffer.from('a')), key(Buffer.alloc(0))].sort())
    assert.ok(got.get(key(big))!.equals(big))
    assert.equal(got.get(key(Buffer.from('a')))!.toString(), 'a')
    assert.equal(got.get(key(Buffer.alloc(0)))!.length, 0)
    assert.deepEqual(await count(store), { blobs: 4, chunks: 4 })
  })
})
