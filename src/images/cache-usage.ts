import { randomUUID } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../shared/private-data-dir.ts'

/**
 * What the node's image cache knows of its own use: which layers and configs are held now (by a
 * pull under way or a sandbox running on them), when each was last used, and how many bytes each
 * takes on disk; and the sweep that removes what no one has used for the keep time.
 *
 * Last use is kept on disk, so a restart neither makes everything look unused nor keeps it for
 * ever: a layer's is the mtime of `used/<hex>` (whose content is the layer's bytes on disk; the
 * layer folder's own mtime is the image root's, not ours to touch), a config's the mtime of its
 * file. A pull touches them; a hold's release touches them again, and every sweep touches what is
 * held, so a sandbox that ran for weeks before a crash is not taken for weeks unused.
 *
 * Holds and removals are decided on the service's one thread: a pull takes its hold in the same
 * synchronous stretch in which it learns the digests (before it looks in the cache), and the
 * sweep checks a layer is neither held nor downloading in the same stretch in which it renames it
 * away. So a pull either holds the layer before the sweep looks (the sweep passes it by), or finds
 * it gone (and downloads it again); never a layer that vanishes under it. A removed layer is
 * renamed into `tmp/` first and deleted there, so a crash mid-delete leaves nothing in `layers/`
 * that looks whole: `tmp/` is emptied at start.
 */

export type CacheDirs = { layers: string; configs: string; tmp: string; used: string }

export type CacheUsage = {
  /** Holds these digests (layers and configs) until the returned release is called (once; later calls do nothing). */
  hold(digests: string[]): () => void
  /** Marks these digests used now. */
  touch(digests: string[]): void
  /** Records a layer about to be renamed into place: its bytes on disk, used now. */
  recordLayer(digest: string, bytes: number): void
  /** Records a config written into the cache. */
  recordConfig(digest: string, bytes: number): void
  /** Bytes on disk and layers of the cache (known to it: a layer from before last-use records is counted once a sweep adopts it). */
  stats(): { bytes: number; layers: number }
  /**
   * Removes the layers and configs neither held, nor downloading (`busy`), nor used within `keepMs`
   * of now; adopts layers that have no record yet (used now). Resolves the layers it removed.
   */
  sweep(keepMs: number, busy: (digest: string) => boolean): Promise<string[]>
}

const hexOf = (digest: string) => digest.slice('sha256:'.length)
const isHex = (name: string) => /^[0-9a-f]{64}$/.test(name)

/** Bytes a folder takes on disk: allocated blocks of every entry, a hard-linked file once. */
export async function diskUsage(dir: string): Promise<number> {
  const seen = new Set<number>()
  let bytes = 0
  const walk = async (d: string): Promise<void> => {
    const entries = await fs.promises.readdir(d, { withFileTypes: true })
    await Promise.all(
      entries.map(async (e) => {
        const full = path.join(d, e.name)
        const st = await fs.promises.lstat(full)
        if (st.nlink > 1 && !st.isDirectory()) {
          if (seen.has(st.ino)) return
          seen.add(st.ino)
        }
        bytes += st.blocks * 512
        if (st.isDirectory()) await walk(full)
      }),
    )
  }
  bytes += (await fs.promises.lstat(dir)).blocks * 512
  await walk(dir)
  return bytes
}

export function cacheUsage(dirs: CacheDirs, now: () => number): CacheUsage {
  fs.mkdirSync(dirs.used, { recursive: true, mode: PRIVATE_DIR_MODE })
  const holds = new Map<string, number>()
  const layerBytes = new Map<string, number>()
  const configBytes = new Map<string, number>()
  const usedFile = (digest: string) => path.join(dirs.used, hexOf(digest))
  const configFile = (digest: string) => path.join(dirs.configs, `${hexOf(digest)}.json`)
  const layerDir = (digest: string) => path.join(dirs.layers, hexOf(digest))

  // What the cache held at the last stop: layers with their record, and configs.
  for (const hex of fs.readdirSync(dirs.used)) {
    if (!isHex(hex) || !fs.existsSync(path.join(dirs.layers, hex))) continue
    const bytes = Number(fs.readFileSync(path.join(dirs.used, hex), 'utf8'))
    layerBytes.set(`sha256:${hex}`, Number.isFinite(bytes) ? bytes : 0)
  }
  for (const name of fs.readdirSync(dirs.configs)) {
    if (name.endsWith('.json') && isHex(name.slice(0, -5))) configBytes.set(`sha256:${name.slice(0, -5)}`, fs.statSync(path.join(dirs.configs, name)).size)
  }

  /** Sets the last use of a digest's record to now; false when it has none (not in the cache). */
  function touchOne(digest: string): boolean {
    const t = new Date(now())
    for (const file of [usedFile(digest), configFile(digest)]) {
      try {
        fs.utimesSync(file, t, t)
        return true
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
      }
    }
    return false
  }

  const usage: CacheUsage = {
    hold(digests) {
      for (const d of digests) holds.set(d, (holds.get(d) ?? 0) + 1)
      let released = false
      return () => {
        if (released) return
        released = true
        for (const d of digests) {
          const n = (holds.get(d) ?? 1) - 1
          if (n > 0) holds.set(d, n)
          else holds.delete(d)
        }
        // The keep time counts from the end of the last use, not its start.
        usage.touch(digests)
      }
    },
    touch(digests) {
      for (const d of digests) touchOne(d)
    },
    recordLayer(digest, bytes) {
      const tmp = path.join(dirs.tmp, `used-${randomUUID()}`)
      fs.writeFileSync(tmp, String(bytes), { mode: PRIVATE_FILE_MODE })
      const t = new Date(now())
      fs.utimesSync(tmp, t, t)
      fs.renameSync(tmp, usedFile(digest))
      layerBytes.set(digest, bytes)
    },
    recordConfig(digest, bytes) {
      configBytes.set(digest, bytes)
      touchOne(digest)
    },
    stats() {
      let bytes = 0
      for (const n of layerBytes.values()) bytes += n
      for (const n of configBytes.values()) bytes += n
      return { bytes, layers: layerBytes.size }
    },
    async sweep(keepMs, busy) {
      // Held layers are in use now: said on disk, so a crash loses at most one sweep's worth.
      usage.touch([...holds.keys()])
      const removed: string[] = []
      const taken = (digest: string) => holds.has(digest) || busy(digest)
      const lastUse = (file: string) => fs.statSync(file, { throwIfNoEntry: false })?.mtimeMs
      for (const hex of await fs.promises.readdir(dirs.layers)) {
        const digest = `sha256:${hex}`
        if (!isHex(hex)) continue
        if (!layerBytes.has(digest)) {
          // A layer from before last use was recorded (or whose record a crash cut off): counted,
          // and kept for the keep time from now, never taken for unused.
          const bytes = await diskUsage(layerDir(digest)).catch(() => 0)
          if (!fs.existsSync(layerDir(digest)) || fs.existsSync(usedFile(digest))) continue
          usage.recordLayer(digest, bytes)
          continue
        }
        // From here to the rename, nothing is awaited: no pull can take the layer in between.
        const last = lastUse(usedFile(digest))
        if (taken(digest)) continue
        if (last === undefined) {
          // Its record went missing (by hand): kept, and recorded as used now, rather than guessed unused.
          usage.recordLayer(digest, layerBytes.get(digest)!)
          continue
        }
        if (last > now() - keepMs) continue
        const trash = path.join(dirs.tmp, `removed-${hex.slice(0, 16)}-${randomUUID()}`)
        fs.renameSync(layerDir(digest), trash)
        fs.rmSync(usedFile(digest), { force: true })
        layerBytes.delete(digest)
        removed.push(digest)
        // Not rmSync: a layer may be thousands of files, and this is the service's event loop.
        await fs.promises.rm(trash, { recursive: true, force: true })
      }
      // Records of layers no longer there (a crash between the rename and the record's removal).
      for (const hex of await fs.promises.readdir(dirs.used)) {
        const digest = `sha256:${hex}`
        if (!fs.existsSync(layerDir(digest)) && !taken(digest)) fs.rmSync(usedFile(digest), { force: true })
      }
      for (const digest of [...configBytes.keys()]) {
        const last = lastUse(configFile(digest))
        if (taken(digest) || (last !== undefined && last > now() - keepMs)) continue
        // Unused for the keep time, or gone already: an unlink is all or nothing.
        fs.rmSync(configFile(digest), { force: true })
        configBytes.delete(digest)
      }
      return removed
    },
  }
  return usage
}
