import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { randomText } from '../shared/ids.ts'
import { isEmptyOrMissing } from '../shared/empty-folder.ts'
import type { ContentCache } from './content-cache.ts'
import type { ContentStore } from './content-store.ts'
import { checkManifest, contentsOf, manifestContents, type FileEntry, type Manifest } from './manifest.ts'

/**
 * Writes the tree a manifest names into `dir` when `dir` is missing or an empty folder; false when
 * it holds anything (nothing is written then). Runs as root on the host, so the manifest is
 * hostile whoever made it (checkManifest refuses it whole: `..`, absolute paths, a path twice, a
 * path under a link or a file, unknown types; modes masked), and it is all or nothing, as a
 * snapshot's unpack is (sandbox/local/workspace-unpack.ts): the contents are fetched into the
 * node's cache first (only those it lacks, checked against their hashes), the tree is written in
 * a folder beside `dir`, private to root, and renamed into place only when whole. Links are made
 * last, as links, and nothing is written through one: the side folder is ours alone and every
 * path in it is under folders this function made. Owners are not restored: the sandbox that next
 * runs over the folder gives the tree to its own uid, as after a snapshot's unpack.
 */
export async function materialize(manifest: Manifest, dir: string, from: { store: ContentStore; cache: ContentCache }): Promise<boolean> {
  const m = checkManifest(manifest)
  if (!isEmptyOrMissing(dir)) return false
  const all = manifestContents(m)
  const need = new Map([...from.cache.missing(all.keys())].map((h) => [h, all.get(h)!]))
  if (need.size) await from.cache.fill(from.store, need)
  // A node that never held this workspace may not have made the folder of workspaces yet.
  await fsp.mkdir(path.dirname(dir), { recursive: true })
  const aside = path.join(path.dirname(dir), `.materialize-${path.basename(dir)}-${randomText(8)}`)
  await fsp.mkdir(aside, { mode: 0o700 })
  try {
    await writeTree(m, aside, from.cache)
    if (!isEmptyOrMissing(dir)) return false
    // rename over an empty folder is atomic, and refuses one that is no longer empty.
    await fsp.rename(aside, dir)
    return true
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOTEMPTY' || code === 'EEXIST') return false
    throw err
  } finally {
    await fsp.rm(aside, { recursive: true, force: true })
  }
}

const SLICE = 128

/** Folders and files first (folders writable by us meanwhile), then links, then the folders' modes, deepest first. */
async function writeTree(m: Manifest, root: string, cache: ContentCache): Promise<void> {
  const folders: Array<[string, number]> = []
  let written = 0
  for (const e of m.entries) {
    // Synchronous calls in slices, as the walks do: a large tree never stalls the service for long.
    if (++written % SLICE === 0) await new Promise((r) => setImmediate(r))
    const to = path.join(root, e.path)
    if (e.type === 'dir') {
      fs.mkdirSync(to, { mode: 0o700 })
      folders.push([to, e.mode])
    } else if (e.type === 'file') writeFile(e, to, cache)
  }
  for (const e of m.entries) if (e.type === 'symlink') fs.symlinkSync(e.target, path.join(root, e.path))
  for (const [to, mode] of folders.reverse()) fs.chmodSync(to, mode)
  fs.chmodSync(root, m.mode)
}

function writeFile(e: FileEntry, to: string, cache: ContentCache): void {
  const parts = contentsOf(e)
  if (parts.length === 1) {
    // A copy, not a link to the cache's file: the workspace's file is the agent's to change. EXCL: never over anything.
    fs.copyFileSync(cache.fileOf(parts[0]!.hash), to, fs.constants.COPYFILE_EXCL | fs.constants.COPYFILE_FICLONE)
  } else {
    const out = fs.openSync(to, 'wx', 0o600)
    try {
      for (const c of parts) fs.writeSync(out, fs.readFileSync(cache.fileOf(c.hash)))
    } finally {
      fs.closeSync(out)
    }
  }
  fs.chmodSync(to, e.mode)
}

