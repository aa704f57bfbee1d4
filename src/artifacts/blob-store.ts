import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { Transform, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, writePrivateFileWhole } from '../shared/private-data-dir.ts'

export type StoredBlob = { key: string; size: number; sha256: string }

/**
 * Where artifact bytes and workspace snapshots live, apart from the workspace that made them (they
 * outlive it). Local files under the data folder on SQLite (one process, one host); rows of the
 * database on PostgreSQL (database-blob-store.ts), which every node reaches.
 */
export type BlobStore = {
  /** Stores the bytes of `source`; refuses (BlobTooLarge) past `maxBytes` and keeps nothing then. */
  put(source: Readable, maxBytes: number): Promise<StoredBlob>
  /**
   * Stores many small blobs held in memory at once (a checkpoint's contents: thousands of small
   * files), each under its sha256, without a stream and a transaction per blob: one transaction
   * on the database. Resolves the keys it stored that were not stored before. Refuses
   * (BlobTooLarge) when one is past `maxBytes`, and stores none then.
   */
  putMany(items: Buffer[], maxBytes: number): Promise<Set<string>>
  /**
   * The bytes of many small stored blobs at once, held in memory (a checkpoint's contents brought
   * to a node): one query on the database instead of two per blob. A key whose copy is gone is
   * absent from the answer. The caller keeps the total small (a batch of a few MiB).
   */
  getMany(keys: string[]): Promise<Map<string, Buffer>>
  /** The bytes of a stored blob, or null when its copy is gone. */
  open(key: string): Promise<Readable | null>
  exists(key: string): Promise<boolean>
  /** Which of `keys` are stored: many asked at once (a publication's batch), a query, not one each. */
  existing(keys: string[]): Promise<Set<string>>
  /**
   * Removes the blob; resolves as well when it is already gone. A reader still streaming it may
   * fail part way (an error, never a short blob passed off as whole). The caller decides that
   * nothing names the key any more: the store keeps no count of who refers to a blob.
   */
  delete(key: string): Promise<void>
}

export class BlobTooLarge extends Error {}

/**
 * Content-addressed files: a blob's key is its sha256, so the same bytes published twice are
 * stored once, and a copy is written under a temporary name and renamed into place, so a reader
 * never sees half of one.
 */
export function localBlobStore(root: string): BlobStore {
  const tmp = path.join(root, 'tmp')
  // Artifact bytes and workspace snapshots are the workspaces' contents: the service's user's alone.
  fs.mkdirSync(tmp, { recursive: true, mode: PRIVATE_DIR_MODE })
  const fileOf = (key: string) => {
    if (!/^[0-9a-f]{64}$/.test(key)) throw new Error(`not a blob key: ${key}`)
    return path.join(root, key.slice(0, 2), key)
  }
  return {
    async put(source, maxBytes) {
      const hash = createHash('sha256')
      let size = 0
      const count = new Transform({
        transform(chunk: Buffer, _enc, done) {
          size += chunk.length
          if (size > maxBytes) return done(new BlobTooLarge(`over ${maxBytes} bytes`))
          hash.update(chunk)
          done(null, chunk)
        },
      })
      const part = path.join(tmp, randomBytes(12).toString('hex'))
      try {
        await pipeline(source, count, fs.createWriteStream(part, { flags: 'wx', mode: PRIVATE_FILE_MODE }))
        const sha256 = hash.digest('hex')
        const file = fileOf(sha256)
        await fsp.mkdir(path.dirname(file), { recursive: true, mode: PRIVATE_DIR_MODE })
        await fsp.rename(part, file)
        return { key: sha256, size, sha256 }
      } finally {
        await fsp.rm(part, { force: true })
      }
    },
    async putMany(items, maxBytes) {
      if (items.some((b) => b.length > maxBytes)) throw new BlobTooLarge(`over ${maxBytes} bytes`)
      const added = new Set<string>()
      let written = 0
      for (const bytes of items) {
        const key = createHash('sha256').update(bytes).digest('hex')
        const file = fileOf(key)
        if (added.has(key) || fs.existsSync(file)) continue
        // Synchronous, yielding now and then: a promise per small file spends its time waiting on the thread pool.
        writePrivateFileWhole(tmp, file, bytes)
        added.add(key)
        if (++written % 64 === 0) await new Promise((r) => setImmediate(r))
      }
      return added
    },
    async getMany(keys) {
      const out = new Map<string, Buffer>()
      for (const key of keys) {
        try {
          out.set(key, await fsp.readFile(fileOf(key)))
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
        }
      }
      return out
    },
    async open(key) {
      try {
        const fh = await fsp.open(fileOf(key), 'r')
        return fh.createReadStream()
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
        throw err
      }
    },
    exists: (key) => fsp.access(fileOf(key)).then(() => true, () => false),
    async existing(keys) {
      const found = await Promise.all(keys.map((key) => fsp.access(fileOf(key)).then(() => key, () => null)))
      return new Set(found.filter((k): k is string => k !== null))
    },
    // An open stream keeps reading the unlinked file to its end.
    delete: (key) => fsp.rm(fileOf(key), { force: true }),
  }
}
