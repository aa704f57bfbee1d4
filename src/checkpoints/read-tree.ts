import { createHash } from 'node:crypto'
import fs from 'node:fs'
import { cutPoint, MAX_CHUNK } from './chunker.ts'
import { LARGE_FILE_BYTES, plainPath, SAFE_MODE_BITS, sortEntries, type Chunk, type FileEntry, type Manifest, type ManifestEntry } from './manifest.ts'

/**
 * The manifest of a workspace folder, read from the host as root while the agent's processes may
 * still be changing the tree, in the manner of the snapshot's pack (sandbox/local/workspace-pack.ts,
 * whose files this seam may not import): every entry opened relative to its parent folder's fd
 * with O_NOFOLLOW, so a folder swapped for a link mid-walk is never followed out of the
 * workspace, and each file hashed through the fd that was checked. An entry that changes under
 * the walk (gone, swapped for a link) is left out: the change that did it is the next
 * checkpoint's. `.git` and `node_modules` are walked too, as snapshots pack them.
 *
 * Each content read is handed to `sink` (the store's writer) with its hash, read once: the
 * bytes stored are the bytes hashed, whatever the file holds a moment later.
 */
export type ContentSink = (hash: string, bytes: Buffer) => Promise<void> | void

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = fs.constants
const at = (dir: number, name: string) => `/proc/self/fd/${dir}/${name}`
/** Codes that mean "this entry changed under us". */
const RACY = new Set(['ENOENT', 'ENOTDIR', 'ELOOP'])
const racy = (err: unknown) => RACY.has((err as NodeJS.ErrnoException).code ?? '')
/** Synchronous calls, yielding to the event loop every SLICE entries (see workspace-walk.ts for why). */
const SLICE = 128
/** Bytes read from a large file at once, between two yields. */
const READ_PIECE = 1024 * 1024

type Walk = { sink: ContentSink | undefined; out: Map<string, ManifestEntry>; seen: number }

/** The whole folder; null when `root` is not a folder. */
export async function buildManifest(root: string, sink?: ContentSink): Promise<Manifest | null> {
  const top = openAt(null, root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  if (top === null) return null
  const walk: Walk = { sink, out: new Map(), seen: 0 }
  try {
    const mode = fs.fstatSync(top).mode & SAFE_MODE_BITS
    await readFolder(walk, top, '')
    return { version: 1, mode, entries: sortEntries([...walk.out.values()]) }
  } finally {
    fs.closeSync(top)
  }
}

/**
 * The manifest of the folder now, from `previous` and the paths that may have changed since it
 * (what the change tracker reports): only those are read again, so it costs what changed. A
 * named path is dropped with all below it and read again as it is now (a folder walked whole,
 * a path gone stays gone); the folders on its way are looked at too (one made or replaced).
 * Paths not named keep their entries from `previous`. Null when `root` is not a folder.
 */
export async function updateManifest(root: string, previous: Manifest, changed: Iterable<string>, sink?: ContentSink): Promise<Manifest | null> {
  const top = openAt(null, root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  if (top === null) return null
  const named = new Set<string>()
  for (const p of changed) if (p === '' || plainPath(p)) named.add(p)
  try {
    const mode = fs.fstatSync(top).mode & SAFE_MODE_BITS
    if (named.has('')) return await buildManifest(root, sink)
    // A path named, or below one named: read again. One pass over the entries, a look per folder above each.
    const stale = (p: string) => {
      for (let i = p.length; i > 0; i = p.lastIndexOf('/', i - 1)) if (named.has(p.slice(0, i))) return true
      return false
    }
    const walk: Walk = { sink, out: new Map(), seen: 0 }
    for (const e of previous.entries) if (!stale(e.path)) walk.out.set(e.path, e)
    for (const p of [...named].sort((a, b) => a.split('/').length - b.split('/').length)) await readPath(walk, top, p)
    return { version: 1, mode, entries: sortEntries([...walk.out.values()]) }
  } finally {
    fs.closeSync(top)
  }
}

/** Reads `rel` again, through the folders on its way; a folder on the way that is not one any more is read in its place. */
async function readPath(walk: Walk, top: number, rel: string): Promise<void> {
  const parts = rel.split('/')
  let dir = top
  try {
    for (let i = 0; i < parts.length; i++) {
      const prefix = parts.slice(0, i).join('/')
      const here = prefix === '' ? parts[i]! : `${prefix}/${parts[i]}`
      // The path itself: what was below it went with `previous` already (a named path is stale).
      if (i === parts.length - 1) return await readEntry(walk, dir, parts[i]!, here, kindOf(dir, parts[i]!))
      const sub = openAt(dir, parts[i]!, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      if (sub === null) {
        // Gone, or no folder now (a file, a link): whatever stands there replaces all below it.
        dropBelow(walk, here)
        return await readEntry(walk, dir, parts[i]!, here, kindOf(dir, parts[i]!))
      }
      if (dir !== top) fs.closeSync(dir)
      dir = sub
      walk.out.set(here, { path: here, type: 'dir', mode: fs.fstatSync(dir).mode & SAFE_MODE_BITS })
    }
  } finally {
    if (dir !== top) fs.closeSync(dir)
  }
}

function dropBelow(walk: Walk, rel: string): void {
  const was = walk.out.get(rel)
  walk.out.delete(rel)
  if (was?.type !== 'dir') return
  const pre = `${rel}/`
  for (const p of walk.out.keys()) if (p.startsWith(pre)) walk.out.delete(p)
}

async function readFolder(walk: Walk, dir: number, prefix: string): Promise<void> {
  let names: fs.Dirent<Buffer>[]
  try {
    names = fs.readdirSync(`/proc/self/fd/${dir}`, { withFileTypes: true, encoding: 'buffer' })
  } catch (err) {
    if (racy(err)) return
    throw err
  }
  for (const dirent of names) {
    const raw = dirent.name
    const name = raw.toString('utf8')
    // A name that is not UTF-8 would come back as another name: left out, as snapshots do.
    if (!Buffer.from(name, 'utf8').equals(raw)) continue
    // The listing's type spares an lstat per entry (most of a walk's time); each kind is checked again as it is opened.
    const kind = dirent.isFile() ? 'file' : dirent.isDirectory() ? 'dir' : dirent.isSymbolicLink() ? 'symlink' : null
    if (kind) await readEntry(walk, dir, name, prefix + name, kind)
  }
}

/** The kind of an entry, from an lstat: null when it is gone or of no kind kept. */
function kindOf(dir: number, name: string): Kind | null {
  let st: fs.Stats | undefined
  try {
    st = fs.lstatSync(at(dir, name), { throwIfNoEntry: false })
  } catch (err) {
    if (racy(err)) return null
    throw err
  }
  return !st ? null : st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'symlink' : null
}

type Kind = ManifestEntry['type']

/** Adds the entry `name` of the folder `dir` (and all below it, for a folder) as `rel`, as the kind it was seen to be; nothing when it is not that any more. */
async function readEntry(walk: Walk, dir: number, name: string, rel: string, kind: Kind | null): Promise<void> {
  if (++walk.seen % SLICE === 0) await new Promise((r) => setImmediate(r))
  if (kind === 'symlink') return readLink(walk, dir, name, rel)
  if (kind === 'file') return readFile(walk, dir, name, rel)
  if (kind !== 'dir') return
  // Opened, not trusted from the listing: a link put there since is refused by O_NOFOLLOW.
  const sub = openAt(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  if (sub === null) return
  try {
    walk.out.set(rel, { path: rel, type: 'dir', mode: fs.fstatSync(sub).mode & SAFE_MODE_BITS })
    await readFolder(walk, sub, `${rel}/`)
  } finally {
    fs.closeSync(sub)
  }
}

function readLink(walk: Walk, dir: number, name: string, rel: string): void {
  let target: Buffer
  try {
    target = fs.readlinkSync(at(dir, name), { encoding: 'buffer' })
  } catch (err) {
    // EINVAL: no link any more.
    if (racy(err) || (err as NodeJS.ErrnoException).code === 'EINVAL') return
    throw err
  }
  const text = target.toString('utf8')
  if (!Buffer.from(text, 'utf8').equals(target) || text === '') return
  walk.out.set(rel, { path: rel, type: 'symlink', mode: 0o777, target: text })
}

async function readFile(walk: Walk, dir: number, name: string, rel: string): Promise<void> {
  // O_NONBLOCK: a fifo swapped in for the file must not hang the open.
  const fd = openAt(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
  if (fd === null) return
  try {
    const st = fs.fstatSync(fd)
    if (!st.isFile()) return
    const mode = st.mode & SAFE_MODE_BITS
    const entry = st.size < LARGE_FILE_BYTES ? await readSmall(walk, fd, st.size) : await readLarge(walk, fd, st.size)
    walk.out.set(rel, { path: rel, type: 'file', mode, ...entry })
  } finally {
    fs.closeSync(fd)
  }
}

/** The file as one content, read up to the size it had when opened (one that grew meanwhile is cut there, the next checkpoint has the rest). */
async function readSmall(walk: Walk, fd: number, size: number): Promise<Pick<FileEntry, 'size' | 'hash'>> {
  const bytes = readUpTo(fd, Buffer.allocUnsafe(size), 0)
  const hash = createHash('sha256').update(bytes).digest('hex')
  await walk.sink?.(hash, bytes)
  return { size: bytes.length, hash }
}

/** The file in content-defined chunks, a piece at a time: at most MAX_CHUNK and a piece in memory. */
async function readLarge(walk: Walk, fd: number, size: number): Promise<Pick<FileEntry, 'size' | 'hash' | 'chunks'>> {
  const whole = createHash('sha256')
  const chunks: Chunk[] = []
  const buf = Buffer.allocUnsafe(MAX_CHUNK + READ_PIECE)
  let held = 0
  let offset = 0
  let ended = false
  while (!ended || held > 0) {
    while (!ended && held < MAX_CHUNK) {
      const want = Math.min(READ_PIECE, size - offset)
      const n = want > 0 ? fs.readSync(fd, buf, held, want, offset) : 0
      offset += n
      held += n
      if (n < want || offset >= size) ended = true
      await new Promise((r) => setImmediate(r))
    }
    // Not yet the file's end: a boundary past MAX_CHUNK is never looked for, so the cut is one a later read would make too.
    const cut = ended ? cutPoint(buf, held) : cutPoint(buf, MAX_CHUNK)
    const bytes = Buffer.from(buf.subarray(0, cut))
    const hash = createHash('sha256').update(bytes).digest('hex')
    whole.update(bytes)
    chunks.push({ hash, size: cut })
    await walk.sink?.(hash, bytes)
    buf.copy(buf, 0, cut, held)
    held -= cut
  }
  const total = chunks.reduce((n, c) => n + c.size, 0)
  const hash = whole.digest('hex')
  // A file cut short below the threshold meanwhile is still named by its chunks: the manifest says what was read.
  return chunks.length > 0 ? { size: total, hash, chunks } : { size: 0, hash }
}

/** Reads from offset 0 until `buf` is full or the file ends; the bytes read. */
function readUpTo(fd: number, buf: Buffer, from: number): Buffer {
  let got = from
  while (got < buf.length) {
    const n = fs.readSync(fd, buf, got, buf.length - got, got)
    if (n === 0) break
    got += n
  }
  return buf.subarray(0, got)
}

/** Opens `name` under `dir` (a path of its own when `dir` is null); null when it changed under us. */
function openAt(dir: number | null, name: string, flags: number): number | null {
  try {
    return fs.openSync(dir === null ? name : at(dir, name), flags)
  } catch (err) {
    if (racy(err)) return null
    throw err
  }
}
