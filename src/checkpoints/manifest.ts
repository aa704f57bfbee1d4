import { promisify } from 'node:util'
import { gunzip, gzip } from 'node:zlib'

/**
 * A workspace folder named by content: every entry below it (folders, regular files, symbolic
 * links; sockets, fifos and devices are no work product and are left out) with its mode, and each
 * file by the sha256 of its bytes, so two manifests that hold the same file hold one content. A
 * large file (LARGE_FILE_BYTES and up) is also named by its content-defined chunks (see
 * chunker.ts): rewritten or shifted in the middle, it shares the chunks around the change.
 */
export type Manifest = {
  version: 1
  /** The mode of the folder itself. */
  mode: number
  /** In path order (comparePaths): a folder before what it holds. */
  entries: ManifestEntry[]
}

export type ManifestEntry = DirEntry | FileEntry | LinkEntry
export type DirEntry = { path: string; type: 'dir'; mode: number }
export type FileEntry = {
  path: string
  type: 'file'
  mode: number
  size: number
  /** sha256 of the whole file. */
  hash: string
  /** The contents that make it, in order, when it is large; absent: the file is one content, `hash`. */
  chunks?: Chunk[]
}
/** A link is written as a link and never followed: its target is only text. */
export type LinkEntry = { path: string; type: 'symlink'; mode: number; target: string }
export type Chunk = { hash: string; size: number }

/** Files of this size and up are stored in content-defined chunks; smaller ones as one content. */
export const LARGE_FILE_BYTES = 4 * 1024 * 1024

/** Mode bits a manifest keeps: setuid and setgid dropped (a workspace is written back as root on the host). */
export const SAFE_MODE_BITS = 0o1777

/**
 * Path order: component by component, so a folder's entries follow it with nothing between them
 * but what lies below it ('a', 'a/b', 'a.txt': '/' sorts before every other character).
 */
export function comparePaths(a: string, b: string): number {
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i)
    let y = b.charCodeAt(i)
    if (x === y) continue
    if (x === 47) x = 0
    if (y === 47) y = 0
    return x - y
  }
  return a.length - b.length
}

/**
 * In path order. The part already in order at the front (a previous manifest's entries, when
 * a few new ones follow) is kept as it is and merged with the rest sorted: an incremental
 * manifest sorts what changed, not the tree.
 */
export function sortEntries(entries: ManifestEntry[]): ManifestEntry[] {
  let run = 1
  while (run < entries.length && comparePaths(entries[run - 1]!.path, entries[run]!.path) < 0) run++
  if (run >= entries.length) return entries
  const keyed = entries.slice(run).map((e) => [e.path.replaceAll('/', '\0'), e] as const)
  keyed.sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0))
  const rest = keyed.map(([, e]) => e)
  const out: ManifestEntry[] = []
  let i = 0
  let j = 0
  while (i < run && j < rest.length) out.push(comparePaths(entries[i]!.path, rest[j]!.path) < 0 ? entries[i++]! : rest[j++]!)
  while (i < run) out.push(entries[i++]!)
  while (j < rest.length) out.push(rest[j++]!)
  return out
}

/** The contents a file is made of, each with its size. */
export function contentsOf(entry: FileEntry): Chunk[] {
  return entry.chunks ?? [{ hash: entry.hash, size: entry.size }]
}

/** Every content the manifest names, once each, with its size. */
export function manifestContents(manifest: Manifest): Map<string, number> {
  const out = new Map<string, number>()
  for (const e of manifest.entries) if (e.type === 'file') for (const c of contentsOf(e)) out.set(c.hash, c.size)
  return out
}

/** A manifest that could not name a tree inside its folder: refused whole, nothing written for it. */
export class BadManifest extends Error {}

const HASH = /^[0-9a-f]{64}$/
const isCount = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0
const isMode = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0

/**
 * The manifest as it may be written on the host (materialize.ts), from wherever it came (the
 * store, another node, a caller): every path relative and plain (no `..`, `.`, empty component,
 * leading slash or NUL), each once, each under a folder entry of the manifest and never under a
 * link or a file, known types, hashes and sizes that add up; modes masked to SAFE_MODE_BITS.
 * Throws BadManifest at the first fault: none of it is used then.
 */
export function checkManifest(input: unknown): Manifest {
  const m = input as Partial<Manifest> | null
  if (!m || typeof m !== 'object' || m.version !== 1 || !isMode(m.mode) || !Array.isArray(m.entries)) throw new BadManifest('not a manifest')
  const kinds = new Map<string, ManifestEntry['type']>()
  const entries: ManifestEntry[] = []
  for (const raw of m.entries as unknown[]) {
    const e = raw as { path?: unknown; type?: unknown; mode?: unknown; target?: unknown } & Partial<Pick<FileEntry, 'size' | 'hash' | 'chunks'>>
    if (!e || typeof e !== 'object') throw new BadManifest('an entry that is not an object')
    const p = e.path
    if (typeof p !== 'string' || !plainPath(p)) throw new BadManifest(`a path that could leave the folder: ${JSON.stringify(p)}`)
    if (kinds.has(p)) throw new BadManifest(`a path named twice: ${p}`)
    // In path order (which also keeps a path from coming twice): what an incremental manifest merges into.
    if (entries.length > 0 && comparePaths(entries.at(-1)!.path, p) >= 0) throw new BadManifest(`${p} is out of path order`)
    const parent = p.includes('/') ? p.slice(0, p.lastIndexOf('/')) : null
    // Its folder listed before it (path order) and a folder: nothing is ever written through a link or into a file.
    if (parent !== null && kinds.get(parent) !== 'dir') throw new BadManifest(`${p} is not under a folder of the manifest`)
    if (!isMode(e.mode)) throw new BadManifest(`${p}: no mode`)
    const mode = e.mode & SAFE_MODE_BITS
    if (e.type === 'dir') entries.push({ path: p, type: 'dir', mode })
    else if (e.type === 'symlink') {
      if (typeof e.target !== 'string' || e.target === '' || e.target.includes('\0')) throw new BadManifest(`${p}: a link without a target`)
      entries.push({ path: p, type: 'symlink', mode: 0o777, target: e.target })
    } else if (e.type === 'file') entries.push(checkFile(p, mode, e))
    else throw new BadManifest(`${p}: unknown type ${JSON.stringify(e.type)}`)
    kinds.set(p, e.type)
  }
  return { version: 1, mode: m.mode & SAFE_MODE_BITS, entries }
}

function checkFile(p: string, mode: number, e: Partial<Pick<FileEntry, 'size' | 'hash' | 'chunks'>>): FileEntry {
  if (!isCount(e.size) || typeof e.hash !== 'string' || !HASH.test(e.hash)) throw new BadManifest(`${p}: no size or hash`)
  const file: FileEntry = { path: p, type: 'file', mode, size: e.size, hash: e.hash }
  if (e.chunks === undefined) return file
  if (!Array.isArray(e.chunks) || e.chunks.length === 0) throw new BadManifest(`${p}: chunks that are not a list`)
  let total = 0
  file.chunks = e.chunks.map((c: Partial<Chunk>) => {
    if (!c || !isCount(c.size) || typeof c.hash !== 'string' || !HASH.test(c.hash)) throw new BadManifest(`${p}: a chunk without size or hash`)
    total += c.size
    return { hash: c.hash, size: c.size }
  })
  if (total !== e.size) throw new BadManifest(`${p}: chunks of ${total} bytes for a file of ${e.size}`)
  return file
}

/** Relative, without `.`, `..`, empty components or NUL: a path that names a place inside the folder, one way only. */
export function plainPath(p: string): boolean {
  if (p === '' || p.includes('\0') || p.startsWith('/')) return false
  return p.split('/').every((part) => part !== '' && part !== '.' && part !== '..')
}

/** The manifest as stored: gzip JSON, the same bytes for the same manifest (so one blob for equal manifests). */
export async function encodeManifest(manifest: Manifest): Promise<Buffer> {
  return promisify(gzip)(Buffer.from(JSON.stringify(manifest)), { level: 6 })
}

/** Refuses (BadManifest) what checkManifest refuses, and bytes that are no gzip JSON. */
export async function decodeManifest(bytes: Buffer): Promise<Manifest> {
  let parsed: unknown
  try {
    parsed = JSON.parse((await promisify(gunzip)(bytes, { maxOutputLength: MAX_MANIFEST_JSON })).toString('utf8'))
  } catch (err) {
    throw new BadManifest('not a stored manifest', { cause: err })
  }
  return checkManifest(parsed)
}

/** Largest manifest read back: about two million entries, far past any workspace a checkpoint takes. */
const MAX_MANIFEST_JSON = 512 * 1024 * 1024
