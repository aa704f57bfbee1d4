import { once } from 'node:events'
import fs from 'node:fs'
import { PassThrough, Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { createGzip } from 'node:zlib'
import { Header, Pack, ReadEntry } from 'tar'
import { opaqueFolders } from './layer-opaque.ts'

/**
 * A workspace folder packed as a gzip tar from the host, as root, while the agent's processes may
 * still be changing the tree (a background server, say). node-tar's own walk would open each path
 * by name: a folder swapped for a link between its check and its read would be followed out of the
 * workspace, and a host file (a key, another workspace) packed into the snapshot that the agent
 * then gets back. So the walk here is ours, in the manner of workspace-walk.ts: every entry opened
 * relative to its parent folder's fd with O_NOFOLLOW, files read through the fd that was checked;
 * node-tar writes the archive from entries we hand it (ReadEntry), never touching a path itself.
 */

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = fs.constants
const at = (dir: number, name: string) => `/proc/self/fd/${dir}/${name}`
/** Codes that mean "this entry changed under us": left out, the next snapshot will have it. */
const RACY = new Set(['ENOENT', 'ENOTDIR', 'ELOOP'])
const racy = (err: unknown) => RACY.has((err as NodeJS.ErrnoException).code ?? '')
/** Fast over slow-but-small: a workspace is mostly small text files, which level 1 already shrinks several times. */
const GZIP_LEVEL = 1
/** Most bytes read from a file at once. */
const READ_PIECE = 256 * 1024
/**
 * Synchronous calls, yielding to the event loop every SLICE entries: a promise per call spent
 * most of its time waiting on the thread pool (20,000 small files: 2.4 s async, a fraction of
 * that sync), and a slice keeps any one stall of the service to a few milliseconds.
 */
const SLICE = 128

/**
 * The sandbox's own layer over its image (the overlay's upper folder), packed after the workspace
 * in the same archive: its entries' paths are absolute (`/opt/tool`: where they are in the
 * sandbox's root), which no workspace entry is and an unpacker that knows no layer leaves out.
 * Whiteouts (character devices 0/0 in an upper folder) are written as OCI `.wh.<name>` entries,
 * opaque folders as `.wh..wh..opq`; owners as `ids` says (see layer-owners.ts).
 */
export type LayerToPack = { upper: string; ids: (host: number) => number }

/** Resolves null when `root` is not a folder (a workspace never made). */
export async function packFolder(root: string, layer?: LayerToPack): Promise<Readable | null> {
  let top: number
  try {
    top = fs.openSync(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  } catch (err) {
    if (racy(err)) return null
    throw err
  }
  // Not portable: a layer's owners are written (a workspace entry names none), and modes as they are.
  // Absolute paths kept: they are the layer's.
  const pack = new Pack({ portable: false, preservePaths: true })
  const tar = new PassThrough()
  pack.on('error', (err) => void tar.destroy(err as Error))
  // node-tar's Pack, paused by a slow reader, can stall for good on entries handed to it
  // (ReadEntry): 20,000 empty files into gzip never finished. So it is never paused: everything it
  // makes goes straight on, and the walk waits instead while the reader is behind (Walk.room).
  pack.on('data', (chunk: Buffer) => void tar.write(chunk))
  pack.on('end', () => void tar.end())
  // Finished, failed, or its reader gone (a refused put): the walk stops at its next wait.
  const stop = new AbortController()
  tar.once('close', () => stop.abort())
  feed(pack, tar, top, stop.signal, layer).then(
    () => void pack.end(),
    (err) => {
      // Not end(): the entry the walk was writing would never end, and the archive would wait on it.
      tar.destroy(err as Error)
      pack.destroy()
    },
  )
  // Compressed apart from node-tar, whose gzip option runs zlib synchronously on every small
  // write (a header, a file of a few hundred bytes): gathered pieces go through Node's gzip
  // stream, off the event loop. An error on either side ends the other, and the reader sees it.
  const gzip = createGzip({ level: GZIP_LEVEL })
  pipeline(Readable.from(gathered(tar), { objectMode: false }), gzip).catch(() => {}) // the error ends gzip too, and the reader sees it there
  return gzip
}

/** node-tar hands out every header and small file on its own: gathered into pieces worth a trip through zlib. */
async function* gathered(source: Readable): AsyncGenerator<Buffer> {
  let pieces: Buffer[] = []
  let size = 0
  for await (const chunk of source) {
    pieces.push(chunk as Buffer)
    size += (chunk as Buffer).length
    if (size >= 64 * 1024) {
      yield Buffer.concat(pieces)
      pieces = []
      size = 0
    }
  }
  if (size) yield Buffer.concat(pieces)
}

/**
 * `room`: resolves once the archive's reader has caught up (at once when it is not behind).
 * `layer`: the walk is in a sandbox's layer (whiteouts kept, owners mapped, its folders listed
 * for the opaque check); null in the workspace.
 */
type Walk = { pack: Pack; signal: AbortSignal; entries: number; room: () => Promise<void>; layer: { ids: (host: number) => number; folders: string[] } | null }

async function feed(pack: Pack, tar: PassThrough, top: number, signal: AbortSignal, layer: LayerToPack | undefined): Promise<void> {
  const room = async () => {
    if (tar.writableNeedDrain) await once(tar, 'drain', { signal })
  }
  const walk: Walk = { pack, signal, entries: 0, room, layer: null }
  try {
    // The folder itself first: an empty workspace still makes an archive, and one with its mode.
    const st = fs.fstatSync(top)
    await add(walk, { path: './', type: 'Directory', mode: st.mode & 0o7777, size: 0, mtime: st.mtime }, null)
    await addFolder(walk, top, '')
  } finally {
    fs.closeSync(top)
  }
  if (layer) await feedLayer(walk, layer)
}

/** The layer's entries after the workspace's; no layer folder (never started) adds none. */
async function feedLayer(walk: Walk, layer: LayerToPack): Promise<void> {
  let top: number
  try {
    top = fs.openSync(layer.upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  } catch (err) {
    if (racy(err)) return
    throw err
  }
  walk.layer = { ids: layer.ids, folders: [] }
  try {
    const st = fs.fstatSync(top)
    await add(walk, { path: '/', type: 'Directory', mode: st.mode & 0o7777, size: 0, mtime: st.mtime, ...owners(walk, st) }, null)
    await addFolder(walk, top, '/')
  } finally {
    fs.closeSync(top)
  }
  // Opaque folders by their attribute, read without following anything (see layer-opaque.ts).
  for (const rel of await opaqueFolders(layer.upper, walk.layer.folders)) {
    await add(walk, { path: `/${rel}/.wh..wh..opq`, type: 'File', mode: 0o644, size: 0, mtime: new Date(0) }, null)
  }
}

const owners = (walk: Walk, st: fs.Stats) => (walk.layer ? { uid: walk.layer.ids(st.uid), gid: walk.layer.ids(st.gid) } : {})

async function addFolder(walk: Walk, dir: number, prefix: string): Promise<void> {
  const names = fs.readdirSync(`/proc/self/fd/${dir}`, { withFileTypes: true, encoding: 'buffer' })
  for (const dirent of names) {
    if (walk.signal.aborted) return
    if (++walk.entries % SLICE === 0) await new Promise((r) => setImmediate(r))
    const raw = dirent.name as unknown as Buffer
    const name = raw.toString('utf8')
    // A name that is not UTF-8 cannot be said in the archive's text headers without changing it.
    if (!Buffer.from(name, 'utf8').equals(raw)) continue
    const rel = prefix + name
    // In a layer a name of that form would come back as a whiteout: it is left out, as OCI layers must.
    if (walk.layer && name.startsWith('.wh.')) continue
    if (dirent.isDirectory()) await addSubfolder(walk, dir, name, rel)
    else if (dirent.isFile()) await addFile(walk, dir, name, rel)
    else if (dirent.isSymbolicLink()) await addLink(walk, dir, name, rel)
    else if (walk.layer && dirent.isCharacterDevice()) await addWhiteout(walk, dir, name, prefix)
    // Sockets, fifos and devices are no work product, and a restored one would mean nothing.
  }
}

/** Opens `name` under the folder `dir` without following a link; null when it changed under us. */
function openAt(dir: number, name: string, flags: number): number | null {
  try {
    return fs.openSync(at(dir, name), flags)
  } catch (err) {
    if (racy(err)) return null
    throw err
  }
}

async function addSubfolder(walk: Walk, dir: number, name: string, rel: string): Promise<void> {
  const sub = openAt(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  if (sub === null) return
  try {
    const st = fs.fstatSync(sub)
    await add(walk, { path: `${rel}/`, type: 'Directory', mode: st.mode & 0o7777, size: 0, mtime: st.mtime, ...owners(walk, st) }, null)
    walk.layer?.folders.push(rel.slice(1))
    await addFolder(walk, sub, `${rel}/`)
  } finally {
    fs.closeSync(sub)
  }
}

async function addFile(walk: Walk, dir: number, name: string, rel: string): Promise<void> {
  // O_NONBLOCK: a fifo swapped in for the file must not hang the open.
  const fd = openAt(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
  if (fd === null) return
  try {
    const st = fs.fstatSync(fd)
    if (!st.isFile()) return
    await add(walk, { path: rel, type: 'File', mode: st.mode & 0o7777, size: st.size, mtime: st.mtime, ...owners(walk, st) }, fd)
  } finally {
    fs.closeSync(fd)
  }
}

async function addLink(walk: Walk, dir: number, name: string, rel: string): Promise<void> {
  let target: Buffer
  let st: fs.Stats
  try {
    target = fs.readlinkSync(at(dir, name), { encoding: 'buffer' })
    st = fs.lstatSync(at(dir, name))
  } catch (err) {
    if (racy(err) || (err as NodeJS.ErrnoException).code === 'EINVAL') return
    throw err
  }
  const linkpath = target.toString('utf8')
  if (!Buffer.from(linkpath, 'utf8').equals(target)) return
  await add(walk, { path: rel, type: 'SymbolicLink', linkpath, mode: 0o777, size: 0, mtime: st.mtime, ...owners(walk, st) }, null)
}

/** A whiteout of the layer (a character device 0/0: overlayfs's, the only devices an upper folder holds) as its OCI entry. */
async function addWhiteout(walk: Walk, dir: number, name: string, prefix: string): Promise<void> {
  let st: fs.Stats
  try {
    st = fs.lstatSync(at(dir, name))
  } catch (err) {
    if (racy(err)) return
    throw err
  }
  if (!st.isCharacterDevice() || st.rdev !== 0) return
  await add(walk, { path: `${prefix}.wh.${name}`, type: 'File', mode: 0o644, size: 0, mtime: st.mtime }, null)
}

type EntryHead = { path: string; type: 'File' | 'Directory' | 'SymbolicLink'; mode: number; size: number; mtime: Date; linkpath?: string; uid?: number; gid?: number }

/**
 * Hands one entry to the archive and writes its bytes: exactly the size the header says, read from
 * the opened file; a file that shrank meanwhile is padded with zeros (the next snapshot has it
 * whole), one that grew is cut at that size. Waits while the archive's reader is behind.
 */
async function add(walk: Walk, head: EntryHead, fd: number | null): Promise<void> {
  await walk.room()
  const entry = new ReadEntry(new Header(head))
  walk.pack.add(entry)
  const put = async (piece: Buffer) => {
    if (!entry.write(piece)) await once(entry, 'drain', { signal: walk.signal })
    await walk.room()
  }
  // Read through the fd that was checked, in pieces that block the event loop a millisecond or
  // so each; zero-filled, so what the file no longer holds stays zeros.
  let offset = 0
  while (fd !== null && offset < head.size) {
    const piece = Buffer.alloc(Math.min(head.size - offset, READ_PIECE))
    const read = fs.readSync(fd, piece, 0, piece.length, offset)
    offset += piece.length
    await put(piece)
    if (read < piece.length) break
  }
  for (let left = head.size - offset; left > 0; left -= READ_PIECE) await put(Buffer.alloc(Math.min(left, READ_PIECE)))
  entry.end()
}
