import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../shared/private-data-dir.ts'
import type { ContentStore } from './content-store.ts'

/**
 * A node's own copies of contents, in a folder of its data folder, each file named by its sha256:
 * a restore fetches from the store only what this node lacks (a takeover of a session whose
 * contents the node already holds from another one costs what differs). A copy is written under
 * a temporary name and renamed into place once its bytes are checked against its name, so the
 * cache never holds bytes under another content's name, whatever the store handed back.
 */
export type ContentCache = {
  /** The path of a content's copy (present or not). */
  fileOf(hash: string): string
  /** Which of `hashes` this node holds no copy of. */
  missing(hashes: Iterable<string>): Set<string>
  /** Fetches `hashes` from the store; rejects when the store lacks one or hands back other bytes (nothing kept of it). */
  fill(store: ContentStore, hashes: Iterable<string>): Promise<{ contents: number; bytes: number }>
}

/** Fetches at once: each is a round trip or more to the store. */
const FETCHES_AT_ONCE = 8

export function contentCache(root: string): ContentCache {
  const tmp = path.join(root, 'tmp')
  fs.mkdirSync(tmp, { recursive: true, mode: PRIVATE_DIR_MODE })
  const fileOf = (hash: string) => {
    if (!/^[0-9a-f]{64}$/.test(hash)) throw new Error(`not a content hash: ${hash}`)
    return path.join(root, hash.slice(0, 2), hash)
  }

  async function fetchOne(store: ContentStore, hash: string): Promise<number> {
    const source = await store.open(hash)
    if (!source) throw new Error(`content ${hash} is not in the store`)
    const sha = createHash('sha256')
    let size = 0
    const count = new Transform({
      transform(chunk: Buffer, _enc, done) {
        sha.update(chunk)
        size += chunk.length
        done(null, chunk)
      },
    })
    const part = path.join(tmp, randomBytes(12).toString('hex'))
    try {
      await pipeline(source, count, fs.createWriteStream(part, { flags: 'wx', mode: PRIVATE_FILE_MODE }))
      if (sha.digest('hex') !== hash) throw new Error(`the store handed back other bytes for content ${hash}`)
      const file = fileOf(hash)
      await fsp.mkdir(path.dirname(file), { recursive: true, mode: PRIVATE_DIR_MODE })
      await fsp.rename(part, file)
      return size
    } finally {
      await fsp.rm(part, { force: true })
    }
  }

  return {
    fileOf,
    missing(hashes) {
      const out = new Set<string>()
      for (const h of hashes) if (!fs.existsSync(fileOf(h))) out.add(h)
      return out
    },
    async fill(store, hashes) {
      const todo = [...new Set(hashes)]
      let bytes = 0
      for (let i = 0; i < todo.length; i += FETCHES_AT_ONCE) {
        const sizes = await Promise.all(todo.slice(i, i + FETCHES_AT_ONCE).map((h) => fetchOne(store, h)))
        for (const s of sizes) bytes += s
      }
      return { contents: todo.length, bytes }
    },
  }
}
