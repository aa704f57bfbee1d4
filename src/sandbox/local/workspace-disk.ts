import { execFile, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { WRAPPER_ENV } from './bubblewrap.ts'
import { logFailure, silentLog, type Log } from '../../shared/log.ts'

const run = promisify(execFile)

/**
 * A workspace's disk quota: its folder is the mount point of an ext4 file system of its own, in a
 * sparse image file (`mke2fs`, from e2fsprogs, loop-mounted), so a write past the quota fails with
 * ENOSPC in the workspace and never fills the file system that holds the store. Neither root file
 * system project quotas nor a tmpfs (which would count against memory) are needed. The image
 * outlives its mount: a fresh boot, a service stop or a crash leaves an image that the next use
 * mounts again; deleting the workspace unmounts it and removes the image.
 */

// nosuid, nodev: nothing the workspace writes may become a setuid program or a device on the host.
const MOUNT_OPTIONS = 'loop,nosuid,nodev,noatime'
// No reserved blocks; inode tables and journal zeroed lazily by the kernel, not by mke2fs.
const MKFS_ARGS = ['-q', '-F', '-t', 'ext4', '-m', '0', '-E', 'lazy_itable_init=1,lazy_journal_init=1,nodiscard']

/**
 * Why this host cannot give workspaces file systems of their own (no mke2fs, no loop devices, no
 * right to mount), or null: a small image is made and loop-mounted once to see. Synchronous, as
 * the host report at start is; it costs a few tens of milliseconds, once per provider.
 */
export function probeDisks(): string | null {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-disk-probe-'))
  const image = path.join(dir, 'probe.ext4')
  const point = path.join(dir, 'mnt')
  try {
    fs.mkdirSync(point)
    fs.closeSync(fs.openSync(image, 'wx', 0o600))
    fs.truncateSync(image, 8 * 1024 * 1024)
    const steps: [string, string[]][] = [
      ['mke2fs', [...MKFS_ARGS, image]],
      ['mount', ['-o', MOUNT_OPTIONS, '--', image, point]],
      ['umount', ['--', point]],
    ]
    for (const [cmd, args] of steps) {
      const r = spawnSync(cmd, args, { env: WRAPPER_ENV, encoding: 'utf8' })
      if (r.error || r.status !== 0) return `${cmd} failed: ${(r.error?.message ?? r.stderr).trim().split('\n')[0]}`
    }
    return null
  } catch (err) {
    return (err as Error).message.split('\n')[0]!
  } finally {
    if (isMountPoint(point)) spawnSync('umount', ['-l', '--', point], { env: WRAPPER_ENV })
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** Whether `dir` is a mount point: on another device than its parent. */
export function isMountPoint(dir: string): boolean {
  try {
    return fs.statSync(dir).dev !== fs.statSync(path.dirname(dir)).dev
  } catch {
    return false
  }
}

/**
 * Mounts the workspace's image on its folder when the image exists and is not mounted yet; false
 * when there is no image, or no folder: a workspace whose folder is gone is gone (the folder, an
 * empty mount point after a boot, is what says a workspace exists), its image left to be replaced.
 */
export async function mountExisting(dir: string, image: string): Promise<boolean> {
  if (isMountPoint(dir)) return true
  if (!fs.existsSync(image) || !fs.existsSync(dir)) return false
  await run('mount', ['-o', MOUNT_OPTIONS, '--', image, dir], { env: WRAPPER_ENV })
  return true
}

/**
 * Mounts the workspace's own file system of `bytes` on `dir`, making its image first when there
 * is none; a folder that already holds files (a workspace from before quotas, or one restored from
 * a snapshot) is copied into the new image (`mke2fs -d`). Returns false, leaving the folder as it
 * was, when its content does not fit the quota.
 */
export async function mountDisk(dir: string, image: string, bytes: number, blank: () => Promise<string | null> = async () => null): Promise<boolean> {
  if (await mountExisting(dir, image)) return true
  fs.mkdirSync(path.dirname(image), { recursive: true, mode: 0o700 })
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  const content = fs.readdirSync(dir).length > 0
  const ready = content ? null : await blank()
  const fresh = ready ?? `${image}.${randomBytes(4).toString('hex')}.new`
  if (!ready) {
    try {
      await makeImage(fresh, bytes, content ? dir : null)
    } catch (err) {
      fs.rmSync(fresh, { force: true })
      if (content) return false
      throw err
    }
  }
  fs.renameSync(fresh, image)
  // What was copied in is set aside, then removed once the image is mounted in its place.
  const aside = content ? `${dir}.${randomBytes(4).toString('hex')}.old` : null
  if (aside) {
    fs.renameSync(dir, aside)
    fs.mkdirSync(dir, { mode: 0o700 })
  }
  try {
    await mountExisting(dir, image)
  } catch (err) {
    fs.rmSync(image, { force: true })
    if (aside) {
      fs.rmdirSync(dir)
      fs.renameSync(aside, dir)
    }
    throw err
  }
  if (aside) await fs.promises.rm(aside, { recursive: true, force: true })
  // mke2fs's lost+found is no part of the agent's workspace (e2fsck makes it again when it needs one).
  fs.rmSync(path.join(dir, 'lost+found'), { recursive: true, force: true })
  return true
}

/** Makes a sparse image of `bytes` holding a file system, with a copy of `from` when given: the host pays for what the workspace writes, up to the quota. */
async function makeImage(file: string, bytes: number, from: string | null): Promise<void> {
  fs.closeSync(fs.openSync(file, 'wx', 0o600))
  fs.truncateSync(file, bytes)
  await run('mke2fs', [...MKFS_ARGS, ...(from ? ['-d', from] : []), file], { env: WRAPPER_ENV })
}

/** Unmounts the workspace's file system (lazily when something still holds it); `remove` deletes its image too. */
export async function unmountDisk(dir: string, image: string, remove: boolean): Promise<void> {
  if (isMountPoint(dir)) {
    try {
      await run('umount', ['--', dir], { env: WRAPPER_ENV })
    } catch {
      // Busy (a process still leaving): detached now, freed when its last user goes.
      await run('umount', ['-l', '--', dir], { env: WRAPPER_ENV })
    }
  }
  if (remove) fs.rmSync(image, { force: true })
}

/**
 * The file systems of one provider's workspaces (folders of `root`, images in `root/.disks`), by
 * folder name. A workspace's mounts and unmounts run one at a time, in call order: a sandbox
 * released while the next one over the same workspace starts must not unmount under it.
 */
export class WorkspaceDisks {
  private root: string
  private log: Log
  /** Each workspace's quota in bytes; 0: plain folders. */
  readonly bytes: number
  /** Why this host cannot give workspaces file systems of their own (see probe()); null while it can. */
  problem: string | null = null
  private probed = false
  private mounted = new Set<string>()
  private queues = new Map<string, Promise<unknown>>()
  private sharing: Promise<void> | null = null
  private shared = false
  /** An empty image of the quota made ahead (`.disks/.blank-*`), as the warm pool parks shells: a new workspace costs a rename, not an mke2fs. */
  private blank: Promise<string | null> | null = null
  private blankFile: string | null = null
  /** The `.restore-` names of the restores under way here (adopt() removes only other ones). */
  private restoring = new Set<string>()

  constructor(root: string, bytes: number, log: Log = silentLog) {
    this.root = root
    this.log = log
    this.bytes = bytes
  }

  /**
   * Why this host cannot give workspaces file systems of their own, found once (probeDisks) and
   * kept: the service then keeps plain folders and says so at start. Only this probe turns quotas
   * off: one workspace's failure (a full disk, loop devices taken for a moment) must not leave
   * every later workspace unbounded.
   */
  probe(): string | null {
    if (this.bytes === 0) return null
    if (!this.probed) {
      this.probed = true
      this.problem ??= probeDisks()
    }
    return this.problem
  }

  /**
   * The workspace's own file system, mounted (made first when it has none). A host that cannot
   * make one keeps plain folders (see probe()); a workspace whose files do not fit its quota stays
   * a plain folder. Throws when the file system cannot be made or mounted: the workspace is not
   * handed out unbounded.
   */
  mount(name: string): Promise<void> {
    return this.serial(name, async () => {
      if (this.bytes === 0) return
      await this.share()
      if (this.problem) return
      if (await mountDisk(path.join(this.root, name), this.imageOf(name), this.bytes, () => this.takeBlank())) this.mounted.add(name)
    })
  }

  /** The blank image made ahead, if it was made (null: make one now), and the next one started. */
  private async takeBlank(): Promise<string | null> {
    const blank = this.blank
    this.blank = null
    this.makeBlank()
    return blank ? await blank : null
  }

  private makeBlank(): void {
    if (this.blank || !this.shared) return
    const file = path.join(this.root, '.disks', `.blank-${randomBytes(4).toString('hex')}.ext4`)
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
    this.blankFile = file
    const made = makeImage(file, this.bytes, null).then(
      () => file,
      () => {
        fs.rmSync(file, { force: true })
        return null
      },
    )
    this.blank = made
  }

  /**
   * Fills a new file system of the quota through `fill` (given where it is mounted) and, when
   * `fill` resolves true, makes it the workspace's: its image renamed into place (replacing an
   * empty one) and mounted on the folder. Made apart from the folder, under `.disks`, so that a
   * crash part way leaves the workspace as it was (a `.restore-` leftover, removed by adopt())
   * and never half filled. Null when workspaces are plain folders (no quota, or a host that
   * cannot make file systems): the caller fills the folder itself. Rejects, keeping nothing,
   * when `fill` does.
   */
  restore(name: string, fill: (dir: string) => Promise<boolean>): Promise<boolean | null> {
    return this.serial(name, async () => {
      if (this.bytes === 0) return null
      await this.share()
      if (this.problem) return null
      const tag = `.restore-${name}-${randomBytes(4).toString('hex')}`
      const image = path.join(this.root, '.disks', `${tag}.ext4`)
      const point = path.join(this.root, '.disks', tag)
      this.restoring.add(tag)
      fs.mkdirSync(point, { recursive: true, mode: 0o700 })
      let filled = false
      try {
        await makeImage(image, this.bytes, null)
        await mountExisting(point, image)
        fs.rmSync(path.join(point, 'lost+found'), { recursive: true, force: true })
        try {
          filled = await fill(point)
        } finally {
          await unmountDisk(point, image, false)
        }
        if (!filled) return false
        // The workspace's own (an empty file system, or none) gives way to the filled one.
        const dir = path.join(this.root, name)
        await unmountDisk(dir, this.imageOf(name), true)
        this.mounted.delete(name)
        fs.renameSync(image, this.imageOf(name))
        fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
        await mountExisting(dir, this.imageOf(name))
        this.mounted.add(name)
        return true
      } finally {
        fs.rmSync(point, { recursive: true, force: true })
        if (!filled) fs.rmSync(image, { force: true })
        this.restoring.delete(tag)
      }
    })
  }

  /** Mounts the workspace's image when it has one (after a restart nothing is mounted until used). */
  mountIfImage(name: string): Promise<void> {
    return this.serial(name, async () => {
      if (this.bytes === 0) return
      await this.share()
      if (await mountExisting(path.join(this.root, name), this.imageOf(name))) this.mounted.add(name)
    })
  }

  /** Unmounts the workspace's file system unless `keep()` says it is in use again by then; `remove` deletes its image. */
  unmount(name: string, remove: boolean, keep: () => boolean = () => false): Promise<void> {
    return this.serial(name, async () => {
      if (this.bytes === 0 || keep()) return
      await unmountDisk(path.join(this.root, name), this.imageOf(name), remove)
      this.mounted.delete(name)
    })
  }

  /**
   * Makes the folder of workspaces a shared mount (a bind of itself), once: a sandbox's init waits
   * in a mount namespace of its own made ahead of its workspace (the warm pool), and a workspace
   * mounted on the host after that reaches it only through a shared mount (on a host whose root
   * is private, as in most containers, nothing would).
   */
  share(): Promise<void> {
    if (this.bytes === 0 || this.probe()) return Promise.resolve()
    this.sharing ??= (async () => {
      fs.mkdirSync(this.root, { recursive: true, mode: 0o700 })
      // Recursive: workspaces a killed service left mounted stay in view.
      if (!mountPoints().has(this.root)) await run('mount', ['--rbind', '--', this.root, this.root], { env: WRAPPER_ENV })
      await run('mount', ['--make-shared', '--', this.root], { env: WRAPPER_ENV })
      this.shared = true
      this.makeBlank()
    })().catch((err) => {
      this.problem ??= (err as Error).message.split('\n')[0]!
    })
    return this.sharing
  }

  /** Takes on the workspace mounts a service killed outright left (unmounted at close like its own), and removes the images it was making or filling. */
  adopt(): void {
    if (this.bytes === 0) return
    const points = mountPoints()
    for (const point of points) if (path.dirname(point) === this.root) this.mounted.add(path.basename(point))
    const disks = path.join(this.root, '.disks')
    const left = (f: string) => (f.startsWith('.blank-') && path.join(disks, f) !== this.blankFile) || (f.startsWith('.restore-') && !this.restoring.has(f.replace(/\.ext4$/, '')))
    for (const f of fs.existsSync(disks) ? fs.readdirSync(disks) : []) {
      if (!left(f)) continue
      const at = path.join(disks, f)
      // A restore cut short: its file system may still be mounted where it was being filled.
      if (points.has(at)) spawnSync('umount', ['-l', '--', at], { env: WRAPPER_ENV })
      fs.rmSync(at, { recursive: true, force: true })
    }
  }

  /** Unmounts every workspace file system: a folder left mounted could not be removed. The next service mounts them again. */
  async close(): Promise<void> {
    // No blank made from here on (a create racing the close would start one).
    const shared = this.shared
    this.shared = false
    const blank = await this.blank
    this.blank = null
    if (blank) fs.rmSync(blank, { force: true })
    // Left mounted, a workspace's file system is found and used again by the next start.
    for (const name of [...this.mounted]) await this.unmount(name, false).catch(logFailure(this.log, 'unmounting a workspace at close failed', { component: 'sandbox', workspace: name }))
    if (shared) await run('umount', ['-l', '--', this.root], { env: WRAPPER_ENV }).catch(logFailure(this.log, 'unmounting the workspace root at close failed', { component: 'sandbox' }))
    this.sharing = null
  }

  private imageOf(name: string): string {
    return path.join(this.root, '.disks', `${name}.ext4`)
  }

  private serial<T>(name: string, op: () => Promise<T>): Promise<T> {
    const run = (this.queues.get(name) ?? Promise.resolve()).then(op)
    const tail = run.catch(() => {}) // the queue only orders: the caller gets `run` and its failure
    this.queues.set(name, tail)
    void tail.then(() => {
      if (this.queues.get(name) === tail) this.queues.delete(name)
    })
    return run
  }
}

/** Every mount point of this mount namespace. */
function mountPoints(): Set<string> {
  let text = ''
  try {
    text = fs.readFileSync('/proc/self/mountinfo', 'utf8')
  } catch {
    /* none to tell */
  }
  const out = new Set<string>()
  for (const line of text.split('\n')) {
    // Written with octal escapes for spaces and the like.
    const point = line.split(' ')[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)))
    if (point) out.add(point)
  }
  return out
}
