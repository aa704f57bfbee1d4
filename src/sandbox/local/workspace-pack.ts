import { once } from 'node:events'
import fs from 'node:fs'
import fsp, { type FileHandle } from 'node:fs/promises'
import { Readable } from 'node:stream'
import { Header, Pack, ReadEntry } from 'tar'

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
const at = (dir: FileHandle, name: string) => `/proc/self/fd/${dir.fd}/${name}`
/** Codes that mean "this entry changed under us": left out, the next snapshot will have it. */
const RACY = new Set(['ENOENT', 'ENOTDIR', 'ELOOP'])
const racy = (err: unknown) => RACY.has((err as NodeJS.ErrnoException).code ?? '')
/** Fast over slow-but-small: a workspace is mostly small text files, which level 1 already shrinks several times. */
const GZIP_LEVEL = 1

/** Resolves null when `root` is not a folder (a workspace never made). */
export async function packFolder(root: string): Promise<Readable | null> {
  let top: FileHandle
  try {
    top = await fsp.open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  } catch (err) {
    if (racy(err)) return null
    throw err
  }
  return Readable.from(archive(top), { objectMode: false })
}

async function* archive(top: FileHandle): AsyncGenerator<Buffer> {
  const pack = new Pack({ portable: true, gzip: { level: GZIP_LEVEL } })
  const stop = new AbortController()
  let failure: unknown = null
  const feeding = feed(pack, top, stop.signal).then(
    () => void pack.end(),
    (err) => {
      failure = err
      pack.end()
    },
  )
  try {
    for await (const chunk of pack) yield chunk as Buffer
    await feeding
    if (failure) throw failure
  } finally {
    // The consumer gave up (a refused put): the walk stops at its next wait and closes its folders.
    stop.abort()
    await feeding
  }
}

async function feed(pack: Pack, top: FileHandle, signal: AbortSignal): Promise<void> {
  try {
    await addFolder(pack, top, '', signal)
  } finally {
    await top.close()
  }
}

async function addFolder(pack: Pack, dir: FileHandle, prefix: string, signal: AbortSignal): Promise<void> {
  const names = await fsp.readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true, encoding: 'buffer' })
  for (const dirent of names) {
    if (signal.aborted) return
    const raw = dirent.name as unknown as Buffer
    const name = raw.toString('utf8')
    // A name that is not UTF-8 cannot be said in the archive's text headers without changing it.
    if (!Buffer.from(name, 'utf8').equals(raw)) continue
    const rel = prefix + name
    if (dirent.isDirectory()) await addSubfolder(pack, dir, name, rel, signal)
    else if (dirent.isFile()) await addFile(pack, dir, name, rel, signal)
    else if (dirent.isSymbolicLink()) await addLink(pack, dir, name, rel)
    // Sockets, fifos and devices are no work product, and a restored one would mean nothing.
  }
}

async function addSubfolder(pack: Pack, dir: FileHandle, name: string, rel: string, signal: AbortSignal): Promise<void> {
  let sub: FileHandle
  try {
    sub = await fsp.open(at(dir, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  } catch (err) {
    if (racy(err)) return
    throw err
  }
  try {
    const st = await sub.stat()
    await add(pack, { path: `${rel}/`, type: 'Directory', mode: st.mode & 0o7777, size: 0, mtime: st.mtime }, null, signal)
    await addFolder(pack, sub, `${rel}/`, signal)
  } finally {
    await sub.close()
  }
}

async function addFile(pack: Pack, dir: FileHandle, name: string, rel: string, signal: AbortSignal): Promise<void> {
  let fh: FileHandle
  try {
    // O_NONBLOCK: a fifo swapped in for the file must not hang the open.
    fh = await fsp.open(at(dir, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
  } catch (err) {
    if (racy(err)) return
    throw err
  }
  try {
    const st = await fh.stat()
    if (!st.isFile()) return
    await add(pack, { path: rel, type: 'File', mode: st.mode & 0o7777, size: st.size, mtime: st.mtime }, fh, signal)
  } finally {
    await fh.close()
  }
}

async function addLink(pack: Pack, dir: FileHandle, name: string, rel: string): Promise<void> {
  let target: Buffer
  let mtime: Date
  try {
    target = await fsp.readlink(at(dir, name), { encoding: 'buffer' })
    mtime = (await fsp.lstat(at(dir, name))).mtime
  } catch (err) {
    if (racy(err) || (err as NodeJS.ErrnoException).code === 'EINVAL') return
    throw err
  }
  const linkpath = target.toString('utf8')
  if (!Buffer.from(linkpath, 'utf8').equals(target)) return
  await add(pack, { path: rel, type: 'SymbolicLink', linkpath, mode: 0o777, size: 0, mtime }, null, new AbortController().signal)
}

type EntryHead = { path: string; type: 'File' | 'Directory' | 'SymbolicLink'; mode: number; size: number; mtime: Date; linkpath?: string }

/**
 * Hands one entry to the archive and writes its bytes: exactly the size the header says, read from
 * the opened file; a file that shrank meanwhile is padded with zeros (the next snapshot has it
 * whole), one that grew is cut at that size. Waits while the archive's reader is behind.
 */
async function add(pack: Pack, head: EntryHead, file: FileHandle | null, signal: AbortSignal): Promise<void> {
  const entry = new ReadEntry(new Header(head))
  pack.add(entry)
  let left = head.size
  if (file && left > 0) {
    for await (const chunk of file.createReadStream({ start: 0, end: left - 1, autoClose: false })) {
      const piece = chunk as Buffer
      left -= piece.length
      if (!entry.write(piece)) await once(entry, 'drain', { signal })
    }
    while (left > 0) {
      const zeros = Buffer.alloc(Math.min(left, 64 * 1024))
      left -= zeros.length
      if (!entry.write(zeros)) await once(entry, 'drain', { signal })
    }
  }
  entry.end()
}
