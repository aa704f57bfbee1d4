import { createHash } from 'node:crypto'
import path from 'node:path'
import { Readable } from 'node:stream'
import type { Db, Store } from '../db/database.ts'
import { randomText } from '../shared/ids.ts'
import { BlobTooLarge, localBlobStore, type BlobStore, type StoredBlob } from './blob-store.ts'

/** Bytes per chunk row: large enough that a blob is few rows, small enough to hold one in memory. */
export const CHUNK_BYTES = 1024 * 1024

/** Key spaces of the blob store: artifact bytes, workspace snapshots (deleted when replaced), and checkpoints' contents and manifests. */
export type BlobSpace = 'artifacts' | 'snapshots' | 'contents'

/**
 * The blob store of a deployment: rows of the database on PostgreSQL, where every node must reach
 * the bytes; local files under the data folder on SQLite (one process on one host, and a long
 * write would hold SQLite's single writer for every other request meanwhile).
 */
export function pickBlobStore(store: Store, dataDir: string, space: BlobSpace): BlobStore {
  const local = localBlobStore(path.join(dataDir, space))
  if (store.dialect !== 'postgres') return local
  const shared = databaseBlobStore(store.db, space)
  if (space !== 'artifacts') return shared
  // Artifacts published before their bytes moved into the database stay readable from the node
  // whose disk holds them.
  return {
    ...shared,
    open: async (key) => (await shared.open(key)) ?? (await local.open(key)),
    exists: async (key) => (await shared.exists(key)) || (await local.exists(key)),
    existing: async (keys) => {
      const found = await shared.existing(keys)
      const rest = keys.filter((k) => !found.has(k))
      for (const k of rest.length ? await local.existing(rest) : []) found.add(k)
      return found
    },
    getMany: async (keys) => {
      const found = await shared.getMany(keys)
      const rest = keys.filter((k) => !found.has(k))
      for (const [k, v] of rest.length ? await local.getMany(rest) : []) found.set(k, v)
      return found
    },
    delete: async (key) => {
      await shared.delete(key)
      await local.delete(key)
    },
  }
}

/** Ends a put whose bytes are already stored under that key: its own rows are rolled back. */
class AlreadyStored extends Error {
  readonly blob: StoredBlob
  constructor(blob: StoredBlob) {
    super('already stored')
    this.blob = blob
  }
}

/**
 * Content-addressed blobs in the `blobs` and `blob_chunks` tables (migration 006 says why rows and
 * not large objects). A put writes its chunks under an upload id of its own and names them in
 * `blobs` in one transaction, so a reader finds a blob whole or not at all, and a refused or
 * failed put (a crash included) leaves nothing behind: its transaction never commits. Two puts
 * of the same bytes at once both write; the second's `blobs` insert waits for the first to commit,
 * finds the key taken and rolls its own chunks back, so one copy is kept.
 *
 * Bytes stream both ways, one chunk in memory at a time. A put holds one connection of the pool
 * in a transaction for as long as its source takes to read.
 */
export function databaseBlobStore(db: Db, space: BlobSpace): BlobStore {
  return {
    async put(source, maxBytes) {
      const upload = randomText(24)
      try {
        return await db.transaction().execute(async (trx) => {
          const hash = createHash('sha256')
          let size = 0
          let seq = 0
          let pending: Buffer[] = []
          let pendingBytes = 0
          const write = (data: Buffer) => trx.insertInto('blob_chunks').values({ upload, seq: seq++, data }).execute()
          for await (const piece of source as AsyncIterable<Buffer | string>) {
            const b = typeof piece === 'string' ? Buffer.from(piece) : piece
            size += b.length
            if (size > maxBytes) throw new BlobTooLarge(`over ${maxBytes} bytes`)
            hash.update(b)
            pending.push(b)
            pendingBytes += b.length
            while (pendingBytes >= CHUNK_BYTES) {
              const all = pending.length === 1 ? pending[0]! : Buffer.concat(pending)
              await write(all.subarray(0, CHUNK_BYTES))
              const rest = all.subarray(CHUNK_BYTES)
              pending = rest.length ? [rest] : []
              pendingBytes = rest.length
            }
          }
          if (pendingBytes > 0) await write(Buffer.concat(pending))
          const key = hash.digest('hex')
          const blob = { key, size, sha256: key }
          const named = await trx
            .insertInto('blobs')
            .values({ space, key, upload, size, chunks: seq, created_at: Date.now() })
            .onConflict((oc) => oc.columns(['space', 'key']).doNothing())
            .returning('key')
            .executeTakeFirst()
          if (!named) throw new AlreadyStored(blob)
          return blob
        })
      } catch (err) {
        if (err instanceof AlreadyStored) return err.blob
        throw err
      }
    },

    async putMany(items, maxBytes) {
      if (items.some((b) => b.length > maxBytes)) throw new BlobTooLarge(`over ${maxBytes} bytes`)
      const byKey = new Map<string, Buffer>()
      for (const b of items) byKey.set(createHash('sha256').update(b).digest('hex'), b)
      // In key order: two calls naming some of the same keys take their locks in one order, never each waiting on the other.
      const rows = [...byKey].sort(([a], [b]) => (a < b ? -1 : 1)).map(([key, bytes]) => ({ key, bytes, upload: randomText(24) }))
      if (rows.length === 0) return new Set()
      return db.transaction().execute(async (trx) => {
        // As put does: chunks under each blob's own upload id, then the names; a key taken already keeps its copy.
        let pending: Array<{ upload: string; seq: number; data: Buffer }> = []
        let pendingBytes = 0
        const flush = async () => {
          if (pending.length) await trx.insertInto('blob_chunks').values(pending).execute()
          pending = []
          pendingBytes = 0
        }
        for (const r of rows) {
          // An empty blob is a name without chunks, as put makes it.
          for (let seq = 0, at = 0; at < r.bytes.length; seq++, at += CHUNK_BYTES) {
            const data = r.bytes.subarray(at, at + CHUNK_BYTES)
            pending.push({ upload: r.upload, seq, data })
            pendingBytes += data.length
            if (pending.length >= 200 || pendingBytes >= 8 * CHUNK_BYTES) await flush()
          }
        }
        await flush()
        const named = new Set<string>()
        const now = Date.now()
        for (let i = 0; i < rows.length; i += 500) {
          const slice = rows.slice(i, i + 500)
          const done = await trx
            .insertInto('blobs')
            .values(slice.map((r) => ({ space, key: r.key, upload: r.upload, size: r.bytes.length, chunks: Math.ceil(r.bytes.length / CHUNK_BYTES), created_at: now })))
            .onConflict((oc) => oc.columns(['space', 'key']).doNothing())
            .returning('key')
            .execute()
          for (const d of done) named.add(d.key)
        }
        const unnamed = rows.filter((r) => !named.has(r.key) && r.bytes.length > 0).map((r) => r.upload)
        for (let i = 0; i < unnamed.length; i += 500) await trx.deleteFrom('blob_chunks').where('upload', 'in', unnamed.slice(i, i + 500)).execute()
        return named
      })
    },

    async getMany(keys) {
      const out = new Map<string, Buffer>()
      for (let i = 0; i < keys.length; i += 500) {
        // One transaction per slice: a blob deleted between the two reads is not handed back short.
        await db.transaction().execute(async (trx) => {
          const named = await trx.selectFrom('blobs').select(['key', 'upload', 'chunks']).where('space', '=', space).where('key', 'in', keys.slice(i, i + 500)).execute()
          const uploads = named.filter((n) => n.chunks > 0).map((n) => n.upload)
          const pieces = new Map<string, Buffer[]>()
          if (uploads.length) {
            const rows = await trx.selectFrom('blob_chunks').select(['upload', 'seq', 'data']).where('upload', 'in', uploads).orderBy('upload').orderBy('seq').execute()
            for (const r of rows) {
              const list = pieces.get(r.upload) ?? []
              list.push(Buffer.isBuffer(r.data) ? r.data : Buffer.from(r.data))
              pieces.set(r.upload, list)
            }
          }
          for (const n of named) {
            const got = pieces.get(n.upload) ?? []
            if (got.length !== n.chunks) throw new Error(`blob ${n.key} was deleted while being read`)
            out.set(n.key, Buffer.concat(got))
          }
        })
      }
      return out
    },

    async open(key) {
      const row = await db.selectFrom('blobs').select(['upload', 'chunks']).where('space', '=', space).where('key', '=', key).executeTakeFirst()
      if (!row) return null
      const { upload, chunks } = row
      // Each chunk is its own short read, not a transaction held for as long as a slow client
      // takes: a blob deleted meanwhile ends the stream with an error rather than short.
      async function* read(): AsyncGenerator<Buffer> {
        for (let seq = 0; seq < chunks; seq++) {
          const chunk = await db.selectFrom('blob_chunks').select('data').where('upload', '=', upload).where('seq', '=', seq).executeTakeFirst()
          if (!chunk) throw new Error(`blob ${key} was deleted while being read`)
          yield Buffer.isBuffer(chunk.data) ? chunk.data : Buffer.from(chunk.data)
        }
      }
      return Readable.from(read(), { objectMode: false })
    },

    async exists(key) {
      const row = await db.selectFrom('blobs').select('key').where('space', '=', space).where('key', '=', key).executeTakeFirst()
      return row !== undefined
    },

    async existing(keys) {
      const found = new Set<string>()
      // In slices: one statement's parameters are bounded.
      for (let i = 0; i < keys.length; i += 500) {
        const rows = await db.selectFrom('blobs').select('key').where('space', '=', space).where('key', 'in', keys.slice(i, i + 500)).execute()
        for (const r of rows) found.add(r.key)
      }
      return found
    },

    async delete(key) {
      await db.transaction().execute(async (trx) => {
        const row = await trx.deleteFrom('blobs').where('space', '=', space).where('key', '=', key).returning('upload').executeTakeFirst()
        if (row) await trx.deleteFrom('blob_chunks').where('upload', '=', row.upload).execute()
      })
    },
  }
}
