import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { once } from 'node:events'
import { Writable, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { createGunzip } from 'node:zlib'
import { Parser, Unpack, type ReadEntry } from 'tar'
import { LayerWriter } from '../../images/layer-writer.ts'
import { randomText } from '../../shared/ids.ts'
import { isEmptyOrMissing } from '../../shared/empty-folder.ts'

/**
 * Unpacks a workspace archive (workspace-pack.ts makes them) into `dir` when `dir` is missing or
 * empty; false when it holds anything (nothing is written then). Runs as root on the host, so the
 * archive is treated as hostile, whoever made it:
 * - the tree is unpacked into a new folder beside `dir`, private to root, and renamed into place
 *   only when whole: a failure leaves `dir` as it was;
 * - an absolute path or `..` is refused (node-tar refuses them too); hard links, devices and fifos
 *   are left out; setuid and setgid bits are dropped; owners are not restored: everything is
 *   root's, and the sandbox that next runs over the folder gives the tree to its own uid (see
 *   prepareWorkspace, which re-owns a folder that is not already its uid's);
 * - symbolic links are made last, after every file and folder is written, and only where no link
 *   stands on the way: nothing is ever written through one, wherever it points (a link pointing
 *   out of the workspace is kept, as the agent made it: inside the sandbox it points into the
 *   sandbox's own view).
 * node-tar creates files through the process umask: modes are set again afterwards as archived.
 *
 * `inside`: `dir` is a file system of its own (the workspace's disk quota), so the tree is unpacked
 * in a folder inside it, where every byte counts against the quota, and its entries are moved up
 * when whole; a failure leaves that folder behind, for the caller to drop with the file system.
 * An archive that does not fit is refused (DiskFull), never cut short.
 *
 * `layer`: the archive's layer entries (absolute paths, see workspace-pack.ts) are written into
 * the folder `layer.into` (made at the first layer entry, the caller's to move into place or remove) as an OCI layer
 * is (LayerWriter: confined to that folder, nothing followed, no device but the whiteouts),
 * their owners through `layer.owner`; it is written whole before this resolves true. Without it,
 * layer entries are left out, as every absolute path is.
 */
export async function unpackInto(dir: string, archive: Readable, opts: { inside?: boolean; layer?: LayerInto } = {}): Promise<boolean> {
  if (!isEmptyOrMissing(dir)) return false
  const aside = opts.inside ? path.join(dir, `.unpack-${randomText(8)}`) : path.join(path.dirname(dir), `.unpack-${path.basename(dir)}-${randomText(8)}`)
  // A node that never ran this workspace may not have made the folder of workspaces yet.
  await fsp.mkdir(path.dirname(dir), { recursive: true })
  await fsp.mkdir(aside, { mode: 0o700 })
  // node-tar reports a file it could not write as a warning and goes on: a full disk is the end.
  let full: Error | null = null
  try {
    const links: { path: string; target: string }[] = []
    const modes = new Map<string, number>()
    const unpack = new Unpack({
      cwd: aside,
      preserveOwner: false,
      onwarn: (_code: string, _message: string, data: { code?: unknown }) => {
        if (data.code === 'ENOSPC' || data.code === 'EDQUOT') full ??= new DiskFull('no room left on the file system it is unpacked into')
      },
      filter: (p: string, entry: ReadEntry | fs.Stats) => {
        const e = entry as ReadEntry
        const rel = safeRelative(p)
        if (rel === null) return false
        if (e.type === 'SymbolicLink') {
          if (e.linkpath) links.push({ path: rel, target: e.linkpath })
          return false
        }
        if (e.type !== 'File' && e.type !== 'OldFile' && e.type !== 'ContiguousFile' && e.type !== 'Directory') return false
        if (typeof e.mode === 'number') {
          e.mode &= 0o1777
          modes.set(rel, e.mode)
        }
        return true
      },
    })
    if (opts.layer) await unpackBoth(archive, unpack, opts.layer)
    else await pipeline(archive, unpack)
    if (full) throw full
    for (const [rel, mode] of modes) await fsp.chmod(path.join(aside, rel), mode).catch(() => {}) // a mode the file system refuses leaves the file as unpacked, still whole
    for (const link of links) await makeLink(aside, link.path, link.target)
    if (opts.inside) {
      // Only the unpack's own folder in there: nothing else writes a workspace while it is restored.
      if ((await fsp.readdir(dir)).some((e) => e !== path.basename(aside))) return false
      for (const entry of await fsp.readdir(aside)) await fsp.rename(path.join(aside, entry), path.join(dir, entry))
      return true
    }
    if (!isEmptyOrMissing(dir)) return false
    // An empty folder is replaced: rename over it is atomic, and refuses one that is no longer empty.
    await fsp.rename(aside, dir)
    return true
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOSPC' || code === 'EDQUOT') throw new DiskFull('no room left on the file system it is unpacked into', { cause: err })
    if ((err as NodeJS.ErrnoException).code === 'ENOTEMPTY' || (err as NodeJS.ErrnoException).code === 'EEXIST') return false
    throw err
  } finally {
    await fsp.rm(aside, { recursive: true, force: true })
  }
}

export type LayerInto = { into: string; owner: (inside: number) => number }

/** Most bytes a layer may unpack to: the snapshot's own ceiling bounds it already. */
const LAYER_MAX_BYTES = 64 * 1024 ** 3

/**
 * One pass over the archive, decompressed once, for two readers: the workspace's unpack (which
 * leaves the absolute paths out) and the layer's parser (which takes only those). Each chunk goes
 * to both, and the next waits for the slower.
 */
async function unpackBoth(archive: Readable, unpack: Unpack, layer: LayerInto): Promise<void> {
  const writer = new LayerWriter(layer.into, LAYER_MAX_BYTES, layer.owner)
  // Made at the first layer entry: an archive without a layer leaves no folder behind.
  let made = false
  const parser = new Parser({ strict: true, filter: (p: string) => typeof p === 'string' && p.startsWith('/') })
  const parsed = new Promise<void>((resolve, reject) => {
    parser.on('entry', (entry: ReadEntry) => {
      if (!made) fs.mkdirSync(layer.into, { recursive: true, mode: 0o700 })
      made = true
      writer.entry(entry)
    })
    parser.on('error', reject)
    parser.on('end', () => resolve())
  })
  const unpacked = new Promise<void>((resolve, reject) => {
    unpack.on('error', reject)
    unpack.on('finish', () => resolve())
  })
  // Either reader's failure ends the wait for the other's drain, through one signal: racing each
  // wait against the two promises instead left a callback on them per chunk for the whole archive.
  // Reported through the pipeline, whose sink fails with it.
  const failed = new AbortController()
  parsed.catch((err: unknown) => failed.abort(err))
  unpacked.catch((err: unknown) => failed.abort(err))
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      try {
        const { signal } = failed
        const waits = [unpack.write(chunk) ? null : once(unpack, 'drain', { signal }), parser.write(chunk) ? null : once(parser, 'drain', { signal })].filter((w) => w !== null)
        if (waits.length === 0) return done()
        Promise.all(waits).then(
          () => done(),
          (err: Error) => done(signal.aborted ? (signal.reason as Error) : err),
        )
      } catch (err) {
        done(err as Error)
      }
    },
    final(done) {
      unpack.end()
      parser.end()
      Promise.all([parsed, unpacked]).then(() => done(), done)
    },
  })
  try {
    await pipeline(archive, createGunzip(), sink)
  } catch (err) {
    writer.abandon()
    throw err
  }
  if (made) await writer.finish()
}

/** An archive that did not fit where it was unpacked (a workspace's disk quota). */
export class DiskFull extends Error {}


/** The entry's path relative to the folder, without `./` or a trailing slash; null when it could leave it. */
function safeRelative(p: string): string | null {
  if (typeof p !== 'string' || p.includes('\0') || p.startsWith('/')) return null
  const parts = p.split('/').filter((s) => s !== '' && s !== '.')
  if (parts.length === 0 || parts.includes('..')) return null
  return parts.join('/')
}

/** A link at `rel` under `root`, unless something stands there already or a link stands on the way. */
async function makeLink(root: string, rel: string, target: string): Promise<void> {
  const parts = rel.split('/')
  let at = root
  for (const part of parts.slice(0, -1)) {
    at = path.join(at, part)
    const st = await fsp.lstat(at).catch(() => null)
    if (st === null) await fsp.mkdir(at, { mode: 0o755 })
    else if (!st.isDirectory()) return
  }
  await fsp.symlink(target, path.join(at, parts.at(-1)!)).catch((err) => {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
  })
}
