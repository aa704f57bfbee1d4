import fs from 'node:fs'
import type { ChangeWindow, FileStamp, WorkspaceChange, WorkspaceSnapshot } from '../sandbox.ts'
import { SandboxUnavailableError } from '../sandbox.ts'
import { FileTree } from './file-tree.ts'
import { countFolders, openWorkspaceDir, SKIPPED_DIRS, snapshotTree } from './workspace-walk.ts'
import { WorkspaceWatcher } from './workspace-watch.ts'

/** After a watcher could not start (no inotifywait, limits reached), walks only until this much later, then tries again. */
const RETRY_MS = 60_000
/** Paths looked at between two yields to the event loop. */
const SLICE = 256
/** Unwatched folders walked at every sync before the watcher is started again instead. */
const MAX_UNWATCHED = 256

/** A window's view: each path changed since it opened, with its stamp then (null: no regular file there). */
type Opened = Map<string, FileStamp | null>

const same = (a: FileStamp | undefined, b: FileStamp | undefined) => a === b || (!!a && !!b && a.size === b.size && a.mtimeMs === b.mtimeMs && a.ino === b.ino)

/**
 * What changed in a workspace folder, in time proportional to what changed. The tracker keeps the
 * stamps of every regular file (as a snapshot would have them) and a watcher that names the paths
 * that may have changed; at each sync it looks at those paths only (a folder that appeared or went
 * is walked, or its known files dropped) and brings the stamps up to date, noting each change in
 * every open window. Looking at the path's state now, not trusting the event's word, keeps it right
 * when events come late, twice or with an old name. Without a watcher (never started, lost to an
 * overflow, a watch limit, its process dying) the next sync starts a new one and then walks the
 * whole tree once, comparing it with the stamps: the same answer, at the old price, once. A tree
 * of more folders than `maxWatches` gets no watcher (its folders counted again after RETRY_MS):
 * each sync walks it.
 */
export class ChangeTracker {
  private root: string
  /** The sandbox's name, which its watcher's fence folder carries (see WorkspaceWatcher.start). */
  private owner: string
  private files = new FileTree()
  private watcher: WorkspaceWatcher | null = null
  /** Paths named by the watcher since the last sync; true: look below it too. */
  private dirty = new Map<string, boolean>()
  /** Folders the watcher left unwatched (see WorkspaceWatcher.watchedInodes): walked at every sync. */
  private unwatched = new Set<string>()
  /** The folders this sync's walks went through, by path with their inode (null: not collected). */
  private walkedFolders: Map<string, number> | null = null
  private windows = new Set<Opened>()
  private queue: Promise<unknown> = Promise.resolve()
  private retryAt = 0
  private closed = false
  /** Most folders watched (one inotify watch each, from the host's shared budget): past it the tree is walked instead. */
  private maxWatches: number

  constructor(root: string, owner: string, maxWatches = Infinity) {
    this.root = root
    this.owner = owner
    this.maxWatches = maxWatches
  }

  /** The watcher's process, when one runs (tests look for leaks and kill it to lose it). */
  get watcherPid(): number | undefined {
    return this.watcher?.pid
  }

  async open(): Promise<ChangeWindow> {
    await this.sync()
    const opened: Opened = new Map()
    this.windows.add(opened)
    let done = false
    return {
      close: async () => {
        if (done) throw new Error('the change window is closed already')
        done = true
        try {
          await this.sync()
        } finally {
          this.windows.delete(opened)
        }
        const out: WorkspaceChange[] = []
        for (const [path, was] of opened) {
          const now = this.files.get(path)
          if (!was && now) out.push({ path, kind: 'created' })
          else if (was && !now) out.push({ path, kind: 'deleted' })
          else if (was && now && !same(was, now)) out.push({ path, kind: 'modified' })
        }
        return out.sort((x, y) => (x.path < y.path ? -1 : x.path > y.path ? 1 : 0))
      },
    }
  }

  /** True when no window is open: the tracker can be dropped without losing an answer. */
  get idle(): boolean {
    return this.windows.size === 0
  }

  /** Stops the watcher; later windows reject. Idempotent. */
  close(): void {
    this.closed = true
    this.watcher?.close()
    this.watcher = null
    this.windows.clear()
  }

  /** One at a time, in call order: a sync must see every change made before it was called. */
  private sync(): Promise<void> {
    const run = this.queue.then(() => this.syncNow())
    this.queue = run.catch(() => {}) // the queue only orders: the caller gets `run` and its failure
    return run
  }

  private async syncNow(): Promise<void> {
    if (this.closed) throw new SandboxUnavailableError('destroyed')
    if (this.watcher) {
      try {
        await this.watcher.fence()
      } catch {
        this.dropWatcher()
      }
    }
    if (!this.watcher) {
      // The new watcher first: what changes during the walk is then named by it.
      await this.startWatcher()
      if (this.closed) throw new SandboxUnavailableError('destroyed')
      await this.reconcile('', true)
      return
    }
    const dirty = this.dirty
    this.dirty = new Map()
    for (const rel of this.unwatched) dirty.set(rel, true)
    // Folders first, shallowest first: a path below a folder walked in this sync needs no second look.
    const walked = new Set<string>()
    const below = (rel: string) => {
      for (let i = rel.lastIndexOf('/'); i > 0; i = rel.lastIndexOf('/', i - 1)) if (walked.has(rel.slice(0, i))) return true
      return false
    }
    const order = [...dirty].sort(([a, da], [b, db]) => (da !== db ? (da ? -1 : 1) : a.split('/').length - b.split('/').length))
    let looked = 0
    const folders = new Map<string, number>()
    this.walkedFolders = folders
    try {
      for (const [rel, deep] of order) {
        if (below(rel)) continue
        await this.reconcile(rel, deep)
        if (deep) walked.add(rel)
        // A burst of writes names many paths: let the service breathe between slices.
        if (++looked % SLICE === 0) await new Promise((r) => setImmediate(r))
      }
    } finally {
      this.walkedFolders = null
    }
    const appeared = [...walked].some((rel) => !this.unwatched.has(rel))
    for (const rel of this.unwatched) if (this.entry(rel.split('/')) !== 'folder') this.unwatched.delete(rel)
    // Folders below .git and node_modules are watched without being named (an npm install): every
    // sync counts. One of the watches is the fence folder's.
    const watched = this.watcher?.watchedInodes()
    if (watched && watched.size - 1 > this.maxWatches) return this.overCeiling()
    if (appeared && watched) this.findUnwatched(folders, watched)
  }

  /** Past the watch ceiling: no watcher, each sync walks the tree, until a later count finds it back under. */
  private overCeiling(): void {
    this.dropWatcher()
    this.retryAt = Date.now() + RETRY_MS
  }

  /**
   * Of the folders this sync walked (those that appeared, and below them), the ones the watcher
   * does not watch: their changes would go unnamed, so they are walked at every sync from now on
   * (too many: a new watcher).
   */
  private findUnwatched(folders: Map<string, number>, watched: Set<number>): void {
    for (const [path, ino] of folders) if (!watched.has(ino)) this.unwatched.add(path)
    if (this.unwatched.size > MAX_UNWATCHED) this.dropWatcher()
  }

  private async startWatcher(): Promise<void> {
    if (Date.now() < this.retryAt) return
    if ((await countFolders(this.root, this.maxWatches)) > this.maxWatches) return this.overCeiling()
    const hooks = {
      // Whichever watcher names a path, looking at it again is harmless.
      changed: (rel: string, deep: boolean) => void this.dirty.set(rel, deep || (this.dirty.get(rel) ?? false)),
      lost: () => {
        if (this.watcher === watcher) this.dropWatcher()
      },
    }
    let watcher: WorkspaceWatcher | null = null
    try {
      watcher = await WorkspaceWatcher.start(this.root, hooks, this.owner)
    } catch {
      this.retryAt = Date.now() + RETRY_MS
      return
    }
    if (this.closed) return watcher.close()
    this.watcher = watcher
  }

  private dropWatcher(): void {
    this.watcher?.close()
    this.watcher = null
    // The next watcher watches the whole tree again.
    this.unwatched.clear()
  }

  /** Brings the stamps of `rel` (and, when `deep` or it was a file, of everything below it) up to date, noting changes. */
  private async reconcile(rel: string, deep: boolean): Promise<void> {
    const parts = rel === '' ? [] : rel.split('/')
    // Below .git and node_modules folders nothing is tracked; a file of that name is (a worktree's `.git`).
    if (parts.slice(0, -1).some((p) => SKIPPED_DIRS.has(p))) return
    const now = parts.length === 0 ? 'folder' : this.entry(parts)
    // A folder's own metadata changed: nothing below it did, unless a file of that name went.
    if (now === 'folder' && !deep && !this.files.get(rel)) return
    const before = this.files.take(parts)
    const untracked = now === 'folder' && SKIPPED_DIRS.has(parts.at(-1) ?? '')
    const after: WorkspaceSnapshot = now === 'folder' ? (untracked ? new Map() : await this.walk(rel)) : now ? new Map([[rel, now]]) : new Map()
    for (const [p, was] of before) if (!same(was, after.get(p))) this.note(p, was)
    const rewritten: Array<[string, FileStamp]> = []
    for (const [p, is] of after) {
      if (!before.has(p)) this.note(p, null)
      else if (!same(before.get(p), is)) rewritten.push([p, is])
      this.files.set(p, is)
    }
    // A write through one hard link is a write to all of them; the watcher named only one path.
    // The links share the inode, so its stamp is theirs: set, not looked up (a file with
    // thousands of links costs one pass over them, not a look at each from each).
    const inodes = new Set<number>()
    for (const [p, is] of rewritten) {
      if (inodes.has(is.ino)) continue
      inodes.add(is.ino)
      for (const link of this.files.linksOf(is.ino, p)) {
        const was = this.files.get(link)
        if (same(was, is)) continue
        this.note(link, was ?? null)
        this.files.set(link, is)
      }
    }
  }

  private note(path: string, was: FileStamp | null): void {
    for (const w of this.windows) if (!w.has(path)) w.set(path, was)
  }

  /** What is at `parts` now, never through a link: a regular file's stamp, 'folder', or null (nothing, a link, a device…). */
  private entry(parts: string[]): FileStamp | 'folder' | null {
    const fd = openWorkspaceDir(this.root, parts.slice(0, -1).join('/'))
    if (fd === null) return null
    try {
      const st = fs.lstatSync(`/proc/self/fd/${fd}/${parts.at(-1)}`, { throwIfNoEntry: false })
      if (st?.isDirectory()) return 'folder'
      return st?.isFile() ? { size: st.size, mtimeMs: st.mtimeMs, ino: st.ino } : null
    } catch {
      return null
    } finally {
      fs.closeSync(fd)
    }
  }

  private async walk(rel: string): Promise<WorkspaceSnapshot> {
    const fd = openWorkspaceDir(this.root, rel)
    if (fd === null) return new Map()
    try {
      const folders = this.walkedFolders
      return await snapshotTree(fd, rel === '' ? '' : `${rel}/`, folders ? (path, dir) => folders.set(path, fs.fstatSync(dir).ino) : undefined)
    } finally {
      fs.closeSync(fd)
    }
  }
}
