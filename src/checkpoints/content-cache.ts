import { createHash } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { PRIVATE_DIR_MODE, writePrivateFileWhole } from '../shared/private-data-dir.ts'
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
  /** Fetches contents (by hash, with their sizes) from the store; rejects when the store lacks one or hands back other bytes (nothing kept of it). */
  fill(store: ContentStore, wanted: Map<string, number>): Promise<{ contents: number; bytes: number }>
}

/** Contents asked of the store at once: bounded in count and in the bytes held. */
const BATCH_CONTENTS = 500
const BATCH_BYTES = 8 * 1024 * 1024

export function contentCache(root: string): ContentCache {
  const tmp = path.join(root, 'tmp')
  fs.mkdirSync(tmp, { recursive: true, mode: PRIVATE_DIR_MODE })
  const fileOf = (hash: string) => {
    if (!/^[0-9a-f]{64}$/.test(hash)) throw new Error(`not a content hash: ${hash}`)
    return path.join(root, hash.slice(0, 2), hash)
  }

  /** Keeps `bytes` as the content `hash`, once they are checked to be that content. */
  function keep(hash: string, bytes: Buffer): void {
    if (createHash('sha256').update(bytes).digest('hex') !== hash) throw new Error(`the store handed back other bytes for content ${hash}`)
    writePrivateFileWhole(tmp, fileOf(hash), bytes)
  }

  return {
    fileOf,
    missing(hashes) {
      const out = new Set<string>()
      for (const h of hashes) if (!fs.existsSync(fileOf(h))) out.add(h)
      return out
    },
    async fill(store, wanted) {
      // In batches of a few MiB, one question to the store each: a content per round trip made a cold restore of 20,000 small files take ~20 s.
      const todo = [...wanted]
      let bytes = 0
      for (let i = 0; i < todo.length; ) {
        const batch: string[] = []
        let size = 0
        while (i < todo.length && batch.length < BATCH_CONTENTS && (batch.length === 0 || size + todo[i]![1] <= BATCH_BYTES)) {
          batch.push(todo[i]![0])
          size += todo[i++]![1]
        }
        const got = await store.getMany(batch)
        for (const hash of batch) {
          const b = got.get(hash)
          if (!b) throw new Error(`content ${hash} is not in the store`)
          keep(hash, b)
          bytes += b.length
        }
      }
      return { contents: todo.length, bytes }
    },
  }
}
