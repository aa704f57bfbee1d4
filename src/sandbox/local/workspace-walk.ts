import fs, { type Dirent } from 'node:fs'
import type { ListedEntry, WorkspaceSnapshot } from '../sandbox.ts'

/**
 * The local provider's walks of a workspace folder from the host, by metadata only (snapshots
 * and listings). The agent may be changing the tree while we walk it (a background process), so
 * every folder is opened relative to its parent's fd with O_NOFOLLOW: a folder swapped for a
 * symlink mid-walk is skipped instead of followed out of the workspace, and nothing here ever
 * reads file content.
 *
 * Synchronous calls in slices: this runs twice per bash call, and sync lstat is 3-4× faster
 * than a promise per file (1,000 files: ~7 ms instead of ~25 ms); yielding to the event loop
 * every SLICE entries keeps a large tree from stalling the service for more than a few ms.
 */

/** Folders never walked: version control and dependencies are not the agent's work product. */
export const SKIPPED_DIRS: ReadonlySet<string> = new Set(['.git', 'node_modules'])

const SLICE = 512
const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW } = fs.constants
const at = (fd: number, name: string) => `/proc/self/fd/${fd}/${name}`

/** Codes that mean "this entry changed under us": skip it, the next snapshot will tell. */
const RACY = new Set(['ENOENT', 'ENOTDIR', 'ELOOP', 'EACCES'])
const racy = (err: unknown) => RACY.has((err as NodeJS.ErrnoException).code ?? '')

/** Opens `name` under the folder `fd`, never through a link; null when it is not a folder (any more). */
function openSubdir(fd: number, name: string): number | null {
  try {
    return fs.openSync(at(fd, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  } catch (err) {
    if (racy(err)) return null
    throw err
  }
}

/**
 * Opens a workspace-relative folder ('' for the root) component by component; null when a
 * component is missing, not a folder, or a link. The caller closes the fd.
 */
export function openWorkspaceDir(root: string, rel: string): number | null {
  let fd: number
  try {
    fd = fs.openSync(root, O_RDONLY | O_DIRECTORY)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  for (const part of rel.split('/').filter((p) => p !== '' && p !== '.')) {
    const next = openSubdir(fd, part)
    fs.closeSync(fd)
    if (next === null) return null
    fd = next
  }
  return fd
}

/** Sees a non-folder entry: its path under the walk's prefix and a host path reaching the entry itself. */
export type Visit = (rel: string, entry: Dirent, where: string) => void

/** Sees a folder of the walk (the first one included): its path under the prefix ('' for the first under ''), and its open fd. */
export type VisitFolder = (rel: string, fd: number) => void

/**
 * Calls `visit` for every non-folder entry below the folder `fd` (links included, never followed),
 * and `visitFolder` for every folder walked; skips SKIPPED_DIRS.
 */
export async function walkTree(fd: number, prefix: string, visit: Visit, visitFolder?: VisitFolder): Promise<void> {
  let count = 0
  const walk = async (dir: number, pre: string): Promise<void> => {
    visitFolder?.(pre.slice(0, -1), dir)
    let entries: Dirent[]
    try {
      entries = fs.readdirSync(`/proc/self/fd/${dir}`, { withFileTypes: true })
    } catch (err) {
      if (racy(err)) return
      throw err
    }
    const subdirs: string[] = []
    for (const e of entries) {
      if (e.isDirectory()) {
        if (!SKIPPED_DIRS.has(e.name)) subdirs.push(e.name)
        continue
      }
      visit(pre + e.name, e, at(dir, e.name))
      if (++count % SLICE === 0) await new Promise((r) => setImmediate(r))
    }
    // Depth first, one folder at a time: open fds stay bounded by the tree's depth.
    for (const name of subdirs) {
      const sub = openSubdir(dir, name)
      if (sub === null) continue
      try {
        await walk(sub, `${pre}${name}/`)
      } finally {
        fs.closeSync(sub)
      }
    }
  }
  await walk(fd, prefix)
}

/**
 * How many folders the workspace holds (itself, SKIPPED_DIRS and what is below them included: a
 * watcher watches those too), counted up to `atMost + 1`: a tree past a ceiling is not walked to
 * its end to say so.
 */
export async function countFolders(dir: string, atMost: number): Promise<number> {
  const root = openWorkspaceDir(dir, '')
  if (root === null) return 0
  let count = 0
  const walk = async (fd: number): Promise<void> => {
    if (++count > atMost) return
    if (count % SLICE === 0) await new Promise((r) => setImmediate(r))
    let entries: Dirent[]
    try {
      entries = fs.readdirSync(`/proc/self/fd/${fd}`, { withFileTypes: true })
    } catch (err) {
      if (racy(err)) return
      throw err
    }
    for (const e of entries) {
      if (!e.isDirectory() || count > atMost) continue
      const sub = openSubdir(fd, e.name)
      if (sub === null) continue
      try {
        await walk(sub)
      } finally {
        fs.closeSync(sub)
      }
    }
  }
  try {
    await walk(root)
  } finally {
    fs.closeSync(root)
  }
  return count
}

/** Every regular file of the workspace (outside SKIPPED_DIRS) with the metadata that tells a change. */
export async function snapshotWorkspace(dir: string): Promise<WorkspaceSnapshot> {
  const root = fs.openSync(dir, O_RDONLY | O_DIRECTORY)
  try {
    return await snapshotTree(root, '')
  } finally {
    fs.closeSync(root)
  }
}

/** Every regular file below the folder `fd` (outside SKIPPED_DIRS), by its path under `prefix`, with its stamp; `visitFolder` sees the folders walked. */
export async function snapshotTree(fd: number, prefix: string, visitFolder?: VisitFolder): Promise<WorkspaceSnapshot> {
  const out: WorkspaceSnapshot = new Map()
  await walkTree(fd, prefix, (rel, entry, where) => {
    if (!entry.isFile()) return
    try {
      const st = fs.lstatSync(where, { throwIfNoEntry: false })
      if (st?.isFile()) out.set(rel, { size: st.size, mtimeMs: st.mtimeMs, ino: st.ino })
    } catch (err) {
      if (!racy(err)) throw err
    }
  }, visitFolder)
  return out
}

/** Every non-folder entry below the folder `rel` of the workspace, links with their target; null when `rel` is no folder. */
export async function listWorkspace(root: string, rel: string): Promise<ListedEntry[] | null> {
  const fd = openWorkspaceDir(root, rel)
  if (fd === null) return null
  const prefix = rel === '' ? '' : `${rel}/`
  const out: ListedEntry[] = []
  try {
    await walkTree(fd, prefix, (p, entry, where) => {
      if (entry.isFile()) return void out.push({ path: p, type: 'file' })
      if (!entry.isSymbolicLink()) return void out.push({ path: p, type: 'other' })
      const link: ListedEntry = { path: p, type: 'link' }
      try {
        link.target = fs.readlinkSync(where)
        // Gone or changed since it was listed: listed without a target.
      } catch {}
      out.push(link)
    })
  } finally {
    fs.closeSync(fd)
  }
  return out
}
