import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import type { ReadEntry } from 'tar'
import { ImagePullError } from './image-pull-error.ts'

const run = promisify(execFile)

/** The metadata an entry's tar header gives, applied after its content is written. */
type Meta = { mode: number; uid: number; gid: number; mtime: Date | undefined }

const OPAQUE = '.wh..wh..opq'
const WHITEOUT = '.wh.'
/** Mode bits a layer may set: permissions, setuid, setgid, sticky. */
const MODE_BITS = 0o7777
/** Ids a tar header may give that are real ids (2^32-1 is "no id" to the kernel). */
const validId = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) >= 0 && (n as number) < 0xffffffff

/**
 * Writes one image layer's tar entries into a folder of its own, as the OCI image-spec's layer
 * rules say, in the form overlayfs reads a lower folder in: a whiteout (`.wh.name`) becomes a
 * character device 0/0 at `name`, an opaque marker (`.wh..wh..opq`) the `trusted.overlay.opaque`
 * attribute on its folder. Modes (setuid and sticky bits included), ownership (when the service
 * runs as root; otherwise files stay the service's), modification times, symbolic and hard links
 * are kept. Extended attributes in pax headers (file capabilities, SELinux labels) are not: a
 * binary that relies on `security.capability` needs its capability some other way. Whiteouts need
 * root (mknod, trusted.* attributes), as the overlay mount that reads them does.
 *
 * The entries are hostile input. Every path is confined to the folder: a leading `/` is read as
 * the layer's root, a `..` component refuses the layer, and no entry is ever written through a
 * symbolic link (every folder on its path must be a real folder the layer made); a hard link must
 * name a file earlier in the same layer; device nodes refuse the layer (the service makes the only
 * ones there are, the whiteouts). Nothing is followed, so a layer cannot write outside its folder
 * whatever order its entries come in.
 *
 * Entries are handled synchronously as the parser emits them (it emits the next one only after a
 * file's data has been read), so no two entries race.
 */
export class LayerWriter {
  readonly #root: string
  readonly #maxFileBytes: number
  /** Host ids of the entries' ids: as they are for an image layer; a sandbox's own layer brought back maps them (see unpackInto). */
  readonly #owner: (id: number) => number
  readonly #asRoot = process.getuid?.() === 0
  /** Folders this layer has (made by an entry or implied by one), relative to the root. */
  readonly #dirs = new Map<string, Meta | undefined>([['', undefined]])
  readonly #whiteouts = new Set<string>()
  readonly #opaque = new Set<string>()
  readonly #fifos = new Map<string, Meta>()
  #openFd: number | undefined
  #written = 0
  entries = 0

  constructor(root: string, maxFileBytes: number, owner: (id: number) => number = (id) => id) {
    this.#root = root
    this.#maxFileBytes = maxFileBytes
    this.#owner = owner
  }

  /** The path of an entry inside the layer, or a refusal: `/` read as the root, `..` refused. */
  #relative(name: string, what: string): string {
    if (name.includes('\0')) throw new ImagePullError('unsafe_layer', `${what} has a NUL in its path`)
    const parts = name.split('/').filter((p) => p !== '' && p !== '.')
    if (parts.includes('..')) throw new ImagePullError('unsafe_layer', `${what} ${JSON.stringify(name.slice(0, 200))} has a .. component`)
    return parts.join('/')
  }

  /** Makes sure every folder above `rel` is a real folder of this layer, creating missing ones. */
  #parents(rel: string, what: string): void {
    const parts = rel.split('/')
    for (let i = 1; i < parts.length; i++) {
      const dir = parts.slice(0, i).join('/')
      if (this.#dirs.has(dir)) continue
      const full = path.join(this.#root, dir)
      const st = fs.lstatSync(full, { throwIfNoEntry: false })
      if (st === undefined) fs.mkdirSync(full, { mode: 0o755 })
      else if (!st.isDirectory()) throw new ImagePullError('unsafe_layer', `${what} lies under ${JSON.stringify(dir)}, which is not a folder in this layer`)
      this.#dirs.set(dir, undefined)
    }
  }

  /** Clears the way for a new entry at `rel`: whatever was there is removed (a folder stays a folder). */
  #replace(rel: string, keepDir: boolean): boolean {
    const full = path.join(this.#root, rel)
    const st = fs.lstatSync(full, { throwIfNoEntry: false })
    if (st === undefined) return false
    if (keepDir && st.isDirectory()) return true
    // rm removes a link itself, never what it points at.
    fs.rmSync(full, { recursive: true, force: true })
    for (const dir of [...this.#dirs.keys()]) if (dir === rel || dir.startsWith(`${rel}/`)) this.#dirs.delete(dir)
    return false
  }

  #meta(entry: ReadEntry): Meta {
    return {
      mode: (entry.mode ?? 0o644) & MODE_BITS,
      uid: this.#owner(validId(entry.uid) ? entry.uid : 0),
      gid: this.#owner(validId(entry.gid) ? entry.gid : 0),
      mtime: entry.mtime instanceof Date && !Number.isNaN(entry.mtime.getTime()) ? entry.mtime : undefined,
    }
  }

  /** Ownership first: chown clears setuid and setgid, which the mode then sets again. */
  #apply(full: string, meta: Meta, link = false): void {
    if (this.#asRoot) fs.lchownSync(full, meta.uid, meta.gid)
    if (!link) fs.chmodSync(full, meta.mode)
    if (meta.mtime) fs.lutimesSync(full, meta.mtime, meta.mtime)
  }

  /** Handles one entry; its data (for a file) is written as the parser delivers it. Throws on a hostile entry. */
  entry(entry: ReadEntry): void {
    this.entries++
    const what = `layer entry ${JSON.stringify(String(entry.path).slice(0, 200))}`
    const rel = this.#relative(String(entry.path), what)
    const base = path.posix.basename(rel)
    const type = entry.type as string
    if (rel === '') {
      // The layer's root itself ("./"): its metadata is the folder's.
      if (type === 'Directory') this.#dirs.set('', this.#meta(entry))
      entry.resume()
      return
    }
    this.#parents(rel, what)
    const full = path.join(this.#root, rel)
    if (base === OPAQUE) {
      this.#opaque.add(path.posix.dirname(rel) === '.' ? '' : path.posix.dirname(rel))
      entry.resume()
      return
    }
    if (base.startsWith(WHITEOUT)) {
      const name = base.slice(WHITEOUT.length)
      // Other .wh..wh. names are AUFS bookkeeping (hard link folders), not whiteouts.
      if (name !== '' && name !== '.' && name !== '..' && !name.startsWith('.wh.')) this.#whiteouts.add(path.posix.join(path.posix.dirname(rel), name).replace(/^\.\//, ''))
      entry.resume()
      return
    }
    const meta = this.#meta(entry)
    // A FIFO is made after the last entry; a later entry at its path takes the path instead.
    this.#fifos.delete(rel)
    switch (type) {
      case 'Directory':
        if (!this.#replace(rel, true)) fs.mkdirSync(full, { mode: 0o700 })
        this.#dirs.set(rel, meta)
        entry.resume()
        return
      case 'File':
      case 'OldFile':
      case 'ContiguousFile':
        this.#replace(rel, false)
        this.#file(entry, full, meta, what)
        return
      case 'SymbolicLink': {
        const target = String(entry.linkpath ?? '')
        if (target === '' || target.includes('\0')) throw new ImagePullError('unsafe_layer', `${what} is a symbolic link to nothing`)
        this.#replace(rel, false)
        // The target is not resolved here: it means a path inside the image, resolved in the workspace.
        fs.symlinkSync(target, full)
        this.#apply(full, meta, true)
        entry.resume()
        return
      }
      case 'Link': {
        const targetRel = this.#relative(String(entry.linkpath ?? ''), `${what}'s link target`)
        const targetFull = path.join(this.#root, targetRel)
        // The target's folders must be this layer's real folders too, or the link would reach through a symbolic link.
        const targetParent = path.posix.dirname(targetRel)
        const st = targetRel === '' || (targetParent !== '.' && !this.#dirs.has(targetParent)) ? undefined : fs.lstatSync(targetFull, { throwIfNoEntry: false })
        if (st === undefined || st.isDirectory()) throw new ImagePullError('unsafe_layer', `${what} is a hard link to ${JSON.stringify(targetRel.slice(0, 200))}, which is not a file earlier in this layer`)
        if (targetRel === rel) {
          entry.resume()
          return
        }
        this.#replace(rel, false)
        fs.linkSync(targetFull, full)
        entry.resume()
        return
      }
      case 'FIFO':
        this.#replace(rel, false)
        this.#fifos.set(rel, meta)
        entry.resume()
        return
      case 'CharacterDevice':
      case 'BlockDevice':
        throw new ImagePullError('unsafe_layer', `${what} is a device node, which image layers may not carry here`)
      default:
        throw new ImagePullError('unsupported', `${what} is a tar entry of type ${type}, which is not unpacked`)
    }
  }

  #file(entry: ReadEntry, full: string, meta: Meta, what: string): void {
    const fd = fs.openSync(full, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600)
    this.#openFd = fd
    entry.on('data', (chunk: Buffer) => {
      this.#written += chunk.length
      // Thrown through the parser's write, which fails the layer.
      if (this.#written > this.#maxFileBytes) throw new ImagePullError('too_large', `${what}: the layer unpacks to more than ${this.#maxFileBytes} bytes`)
      fs.writeSync(fd, chunk)
    })
    entry.on('end', () => {
      this.#openFd = undefined
      try {
        if (this.#asRoot) fs.fchownSync(fd, meta.uid, meta.gid)
        fs.fchmodSync(fd, meta.mode)
        if (meta.mtime) fs.futimesSync(fd, meta.mtime, meta.mtime)
      } finally {
        fs.closeSync(fd)
      }
    })
  }

  /** Closes a file left open by a layer that failed mid-entry. */
  abandon(): void {
    if (this.#openFd !== undefined) fs.closeSync(this.#openFd)
    this.#openFd = undefined
  }

  /**
   * After the last entry: whiteouts and FIFOs are made (one shell for them all: Node has no
   * mknod), opaque folders marked, then every folder gets its own mode, owner and time, deepest
   * first, so that a read-only folder did not stop its own entries being written.
   */
  async finish(): Promise<void> {
    const args: string[] = []
    for (const rel of this.#whiteouts) {
      // A name this layer also has is this layer's: a whiteout hides only lower layers' files.
      if (fs.lstatSync(path.join(this.#root, rel), { throwIfNoEntry: false }) !== undefined) continue
      const parent = path.posix.dirname(rel)
      if (parent !== '.' && !this.#dirs.has(parent)) continue
      args.push('w', path.join(this.#root, rel), '0')
    }
    for (const [rel, meta] of this.#fifos) args.push('p', path.join(this.#root, rel), (meta.mode & 0o777).toString(8))
    for (const rel of this.#opaque) if (this.#dirs.has(rel)) args.push('o', path.join(this.#root, rel), '0')
    if (args.length > 0) {
      const script = 'while [ $# -gt 0 ]; do case $1 in w) mknod "$2" c 0 0;; p) mkfifo -m "$3" "$2";; o) setfattr -n trusted.overlay.opaque -v y "$2";; esac || exit 1; shift 3; done'
      try {
        await run('sh', ['-c', script, 'sh', ...args])
      } catch (err) {
        throw new ImagePullError('unsupported', `the layer's whiteouts could not be made (mknod and setfattr need root): ${(err as { stderr?: string }).stderr?.trim().slice(0, 200) ?? String(err)}`, { cause: err })
      }
      for (const [rel, meta] of this.#fifos) this.#apply(path.join(this.#root, rel), meta)
    }
    const dirs = [...this.#dirs.entries()].sort((a, b) => b[0].split('/').length - a[0].split('/').length)
    for (const [rel, meta] of dirs) this.#apply(path.join(this.#root, rel), meta ?? { mode: 0o755, uid: this.#owner(0), gid: this.#owner(0), mtime: undefined })
  }
}
