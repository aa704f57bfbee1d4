import { Readable } from 'node:stream'
import { buffer } from 'node:stream/consumers'
import type { BlobStore } from '../artifacts/blob-store.ts'
import type { ContentSink } from './read-tree.ts'
import { decodeManifest, encodeManifest, type Manifest } from './manifest.ts'

/**
 * Contents of workspaces and their manifests in the blob store, in a key space of their own (the
 * caller passes the store for it: `contents`), each under its sha256. A content is stored once
 * whoever wrote it and however many manifests name it: a put happens only when the store lacks
 * it. Nothing here decides when a content may go (retention counts the manifests that name it).
 */
export type ContentStore = {
  /** A writer for one manifest's read: its sink takes what the walk reads; `finish` stores what is left. */
  writer(): ContentWriter
  /** Which of `hashes` the store lacks. */
  missing(hashes: Iterable<string>): Promise<Set<string>>
  /** A content's bytes, or null when the store lacks it. */
  open(hash: string): Promise<Readable | null>
  /** Many small contents' bytes at once (a batch of a few MiB); one the store lacks is absent. */
  getMany(hashes: string[]): Promise<Map<string, Buffer>>
  /** Stores the manifest as one blob (gzip JSON) under the hash of those bytes; resolves that key and its size. */
  putManifest(manifest: Manifest): Promise<{ key: string; bytes: number }>
  /** The manifest stored under `key`, checked whole (BadManifest otherwise); null when the store lacks it. */
  getManifest(key: string): Promise<Manifest | null>
}

export type ContentWriter = {
  sink: ContentSink
  /** Stores what is still held; resolves what this writer added to the store (contents it lacked). */
  finish(): Promise<{ contents: number; bytes: number }>
}

/** Largest content: a chunk (see chunker.ts) or a file under LARGE_FILE_BYTES. */
const CONTENT_MAX_BYTES = 4 * 1024 * 1024
/** Largest manifest blob (gzip JSON): millions of entries. */
const MANIFEST_MAX_BYTES = 512 * 1024 * 1024
/**
 * Contents held before the store is asked which it lacks, in one query: a question per file would
 * cost a round trip each (20,000 small files), a batch bounds the memory held meanwhile.
 */
const BATCH_BYTES = 16 * 1024 * 1024
const BATCH_CONTENTS = 500

export function contentStore(blobs: BlobStore): ContentStore {
  return {
    writer: () => contentWriter(blobs),
    async missing(hashes) {
      const want = [...new Set(hashes)]
      const have = want.length ? await blobs.existing(want) : new Set<string>()
      return new Set(want.filter((h) => !have.has(h)))
    },
    open: (hash) => blobs.open(hash),
    getMany: (hashes) => blobs.getMany(hashes),
    async putManifest(manifest) {
      const bytes = await encodeManifest(manifest)
      const blob = await blobs.put(Readable.from([bytes], { objectMode: false }), MANIFEST_MAX_BYTES)
      return { key: blob.key, bytes: blob.size }
    },
    async getManifest(key) {
      const stream = await blobs.open(key)
      if (!stream) return null
      return decodeManifest(await buffer(stream))
    },
  }
}

function contentWriter(blobs: BlobStore): ContentWriter {
  // Held until the next batch's question, by hash (a content read twice is held once).
  let held = new Map<string, Buffer>()
  let heldBytes = 0
  // Known stored (asked, or put by this writer): not asked again.
  const stored = new Set<string>()
  let added = { contents: 0, bytes: 0 }

  async function flush(): Promise<void> {
    if (held.size === 0) return
    const batch = held
    held = new Map()
    heldBytes = 0
    const have = await blobs.existing([...batch.keys()])
    for (const hash of have) stored.add(hash)
    const puts = [...batch].filter(([hash]) => !have.has(hash))
    if (puts.length === 0) return
    // One call for the batch: on PostgreSQL one transaction, not one per small file.
    const fresh = await blobs.putMany(
      puts.map(([, bytes]) => bytes),
      CONTENT_MAX_BYTES,
    )
    for (const [hash, bytes] of puts) {
      stored.add(hash)
      // Stored meanwhile by another writer: not this one's to count.
      if (fresh.has(hash)) added = { contents: added.contents + 1, bytes: added.bytes + bytes.length }
    }
  }

  return {
    async sink(hash, bytes) {
      if (stored.has(hash) || held.has(hash)) return
      held.set(hash, bytes)
      heldBytes += bytes.length
      if (heldBytes >= BATCH_BYTES || held.size >= BATCH_CONTENTS) await flush()
    },
    async finish() {
      await flush()
      return added
    },
  }
}
