import fs from 'node:fs'
import { promisify } from 'node:util'
import { SandboxPathError, type EntryStat, type OpenedFile, type WorkspaceReader } from '../sandbox.ts'
import { listWorkspace, snapshotWorkspace } from './workspace-walk.ts'

/**
 * File access to a workspace from the host, as root, while the agent may be changing the tree
 * under us. Every component is opened relative to the folder opened before it
 * (`/proc/self/fd/<dir>/<name>`: openat without an addon) with O_NOFOLLOW, so a symlink planted
 * anywhere in the path, even between our check and our open, is refused instead of followed out
 * of the workspace. New folders and files are handed to the sandbox uid through their fd.
 */

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = fs.constants
// libuv adds O_CLOEXEC to every open on its own.
const DIR_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW

/**
 * Reads of the workspace folder `root` from the host. Nothing here needs the sandbox's processes,
 * so they work whatever its state, and after it is gone: the folder outlives it.
 */
export function workspaceReader(root: string): WorkspaceReader {
  return {
    readFile: (p) => readWorkspaceFile(root, p),
    stat: (p) => statWorkspaceEntry(root, p),
    async list(p) {
      return listWorkspace(root, folderPath(p))
    },
    openRead: (p) => openWorkspaceStream(root, p),
    snapshot: () => snapshotWorkspace(root),
  }
}

/** A folder to list: '' (or '.') for the workspace itself, else a path splitPath accepts. */
function folderPath(p: string): string {
  if (typeof p === 'string' && p.split('/').every((s) => s === '' || s === '.') && !p.startsWith('/')) return ''
  return splitPath(p).join('/')
}

/** The components of a workspace-relative path; refuses what could leave the workspace. */
export function splitPath(p: string): string[] {
  if (typeof p !== 'string' || p.length === 0) throw new SandboxPathError('the path is empty')
  if (p.includes('\0')) throw new SandboxPathError('the path holds a NUL byte')
  if (p.startsWith('/')) throw new SandboxPathError(`${p} is absolute; paths are relative to the workspace`)
  const parts = p.split('/').filter((s) => s !== '' && s !== '.')
  if (parts.includes('..')) throw new SandboxPathError(`${p} contains "..", which could leave the workspace`)
  if (parts.length === 0) throw new SandboxPathError(`${p} names the workspace itself, not a file in it`)
  return parts
}

const at = (dir: number, name: string) => `/proc/self/fd/${dir}/${name}`
const code = (err: unknown) => (err as NodeJS.ErrnoException).code
/** Closes an fd whose close cannot fail in a way anyone could act on. */
const closeFd = (fd: number) => {
  try {
    fs.closeSync(fd)
  } catch {
    /* already closed */
  }
}
/** Files up to this size are read in one call on the loop; larger ones on the thread pool. */
const READ_INLINE_MAX = 256 * 1024
const readFd = promisify(fs.readFile) as (fd: number) => Promise<Buffer>
const writeFd = promisify(fs.writeFile) as (fd: number, data: Buffer) => Promise<void>
const truncateFd = promisify(fs.ftruncate)

// The walks below (open, lstat, fstat, close of names in the workspace) run on the event loop, not
// on libuv's thread pool: each is a few µs on a local disk, where a round trip through the pool
// costs a hundred and more, and a bash call's changes take several of them a file. The workspace
// is a local folder; a FIFO planted in it is opened O_NONBLOCK, so nothing here can hang.

/** Why opening `name` under `dir` failed, told apart by what is actually there. */
function refusal(dir: number, name: string, shown: string): SandboxPathError | null {
  let st: fs.Stats | null = null
  try {
    st = fs.lstatSync(at(dir, name))
  } catch {
    /* gone meanwhile */
  }
  if (st?.isSymbolicLink()) return new SandboxPathError(`${shown} is a symbolic link; workspace file access does not follow links`)
  return null
}

function openDir(dir: number, name: string, shown: string, create: { uid: number } | null): number | null {
  try {
    return fs.openSync(at(dir, name), DIR_FLAGS)
  } catch (err) {
    const c = code(err)
    if (c === 'ELOOP' || c === 'ENOTDIR') {
      const why = refusal(dir, name, shown)
      if (why) throw why
      if (!create) return null
      throw new SandboxPathError(`${shown} is a file, not a folder`)
    }
    if (c !== 'ENOENT') throw err
    if (!create) return null
  }
  let made = true
  try {
    fs.mkdirSync(at(dir, name), 0o755)
  } catch (err) {
    if (code(err) !== 'EEXIST') throw err
    made = false
  }
  let fd: number
  try {
    fd = fs.openSync(at(dir, name), DIR_FLAGS)
  } catch (err) {
    throw refusal(dir, name, shown) ?? err
  }
  if (made) {
    try {
      fs.fchownSync(fd, create.uid, create.uid)
    } catch (err) {
      closeFd(fd)
      throw err
    }
  }
  return fd
}

/** Opens the folder holding the last component, creating folders when `create` is given. */
function openParent(root: string, parts: string[], create: { uid: number } | null): number | null {
  let dir: number
  try {
    dir = fs.openSync(root, O_RDONLY | O_DIRECTORY)
  } catch (err) {
    // A workspace never made (or deleted) holds nothing; writing into one is an error.
    if (!create && code(err) === 'ENOENT') return null
    throw err
  }
  for (let i = 0; i < parts.length - 1; i++) {
    let next: number | null
    try {
      next = openDir(dir, parts[i]!, parts.slice(0, i + 1).join('/'), create)
    } finally {
      closeFd(dir)
    }
    if (next === null) return null
    dir = next
  }
  return dir
}

const typeOf = (st: fs.Stats): EntryStat['type'] => (st.isFile() ? 'file' : st.isDirectory() ? 'folder' : st.isSymbolicLink() ? 'link' : 'other')

async function statWorkspaceEntry(root: string, p: string): Promise<EntryStat | null> {
  const parts = splitPath(p)
  const dir = openParent(root, parts, null)
  if (dir === null) return null
  try {
    const st = fs.lstatSync(at(dir, parts.at(-1)!))
    return { type: typeOf(st), size: st.size, mtimeMs: st.mtimeMs }
  } catch (err) {
    if (code(err) === 'ENOENT' || code(err) === 'ENOTDIR') return null
    throw err
  } finally {
    closeFd(dir)
  }
}

async function openWorkspaceStream(root: string, p: string): Promise<OpenedFile | null> {
  const opened = openWorkspaceFile(root, p)
  if (!opened) return null
  const { fd, size } = opened
  // Big reads for big files; a small file would pay for a large buffer it does not fill.
  return { size, stream: fs.createReadStream('', { fd, highWaterMark: size >= 1024 * 1024 ? 1024 * 1024 : 64 * 1024 }) }
}

export async function readWorkspaceFile(root: string, p: string): Promise<Buffer | null> {
  const opened = openWorkspaceFile(root, p)
  if (!opened) return null
  try {
    return opened.size <= READ_INLINE_MAX ? fs.readFileSync(opened.fd) : await readFd(opened.fd)
  } finally {
    closeFd(opened.fd)
  }
}

/**
 * Opens a regular file of the workspace for reading, refusing links anywhere in its path; null
 * when it does not exist. The caller closes the fd.
 */
export function openWorkspaceFile(root: string, p: string): { fd: number; size: number } | null {
  const parts = splitPath(p)
  const dir = openParent(root, parts, null)
  if (dir === null) return null
  const name = parts.at(-1)!
  let fd: number
  try {
    // O_NONBLOCK: a FIFO planted by the agent must not hang the service.
    fd = fs.openSync(at(dir, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
  } catch (err) {
    const c = code(err)
    if (c === 'ELOOP') throw refusal(dir, name, p) ?? err
    if (c === 'ENOENT' || c === 'ENOTDIR') return null
    throw err
  } finally {
    closeFd(dir)
  }
  try {
    const st = fs.fstatSync(fd)
    if (st.isDirectory()) throw new SandboxPathError(`${p} is a folder`)
    if (!st.isFile()) throw new SandboxPathError(`${p} is not a regular file`)
    return { fd, size: st.size }
  } catch (err) {
    closeFd(fd)
    throw err
  }
}

export async function writeWorkspaceFile(root: string, p: string, data: Buffer, uid: number, mode?: number): Promise<void> {
  const parts = splitPath(p)
  const dir = openParent(root, parts, { uid })!
  const name = parts.at(-1)!
  let fd: number
  let created = true
  try {
    const flags = O_WRONLY | O_NOFOLLOW | O_NONBLOCK
    try {
      fd = fs.openSync(at(dir, name), flags | O_CREAT | O_EXCL, mode ?? 0o644)
    } catch (err) {
      if (code(err) !== 'EEXIST') throw err
      created = false
      // Never O_TRUNC here: only a regular file, checked below, may be emptied.
      fd = fs.openSync(at(dir, name), flags)
    }
  } catch (err) {
    const c = code(err)
    if (c === 'ELOOP') throw refusal(dir, name, p) ?? err
    if (c === 'EISDIR') throw new SandboxPathError(`${p} is a folder`)
    if (c === 'ENXIO') throw new SandboxPathError(`${p} is not a regular file`)
    throw err
  } finally {
    closeFd(dir)
  }
  try {
    const st = fs.fstatSync(fd)
    if (!st.isFile()) throw new SandboxPathError(`${p} is not a regular file`)
    if (created) fs.fchownSync(fd, uid, uid)
    // The umask trims the creation mode; an explicit mode is meant as given.
    if (mode !== undefined) fs.fchmodSync(fd, mode & 0o777)
    // Emptying a large file frees its blocks, which can take a while: not on the event loop.
    if (st.size <= READ_INLINE_MAX) fs.ftruncateSync(fd, 0)
    else await truncateFd(fd, 0)
    if (data.length <= READ_INLINE_MAX) fs.writeFileSync(fd, data)
    else await writeFd(fd, data)
  } finally {
    closeFd(fd)
  }
}
