import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawnDetached, type SpawnedProcess } from './spawner.ts'

/**
 * A watcher of a workspace's host folder: `inotifywait -m -r` (Debian's inotify-tools, installed
 * by scripts/setup.sh), one process and one inotify instance per watched workspace. It reports
 * which paths may have changed; the caller looks at them (change-tracker.ts). Chosen over Node's
 * fs.watch because libuv drops inotify's queue-overflow event silently, and a lost event must
 * never go unnoticed: inotifywait prints Q_OVERFLOW, and says on stderr when a new folder could
 * not be watched (the watch limit), both of which end this watcher (`onLost`) so that the caller
 * walks the tree once instead.
 *
 * Events of one inotify instance come in the order they happened, so a change to a file in a
 * private folder watched by the same process (the fence) is a barrier: once its event is read,
 * every change made in the workspace before it has been reported. The fence touches (futimes) one
 * of two files kept open, in turn: one syscall and one event, where creating and removing a file
 * cost a journal write and a second event (half a millisecond a fence on this project's disks).
 * In turn, because inotify merges an event identical to the one still unread before it: two
 * touches of one file in a row could arrive as one event, two files never merge.
 */

export type WatchHooks = {
  /** `rel` ('' for the workspace itself) may have changed; `deep` when a folder appeared or went (look below it). */
  changed(rel: string, deep: boolean): void
  /** Events were or may be lost (overflow, a folder left unwatched, the process gone): this watcher is over. */
  lost(reason: string): void
}

/** How long a fence may take before the watcher is taken for stuck (a loaded host is slow, not broken). */
const FENCE_TIMEOUT_MS = 10_000
const START_TIMEOUT_MS = 120_000
/** The fence files, touched in turn. */
const FENCE_FILES = ['a', 'b'] as const
const EVENTS = ['modify', 'attrib', 'create', 'delete', 'move', 'delete_self', 'move_self', 'q_overflow', 'unmount']

/** Fence folders are `<tmp>/warren-fence-<sandbox name>-<6 random characters>`. */
const FENCE_PREFIX = 'warren-fence-'

/**
 * Removes the fence folders of sandboxes named `<prefix>…` that `held` does not hold: a service
 * killed outright removes none of its own (its watchers die with it, their folders stay).
 */
export function removeLeftFences(prefix: string, held: (name: string) => boolean): void {
  let names: string[]
  try {
    names = fs.readdirSync(os.tmpdir())
  } catch {
    return
  }
  for (const entry of names) {
    if (!entry.startsWith(FENCE_PREFIX + prefix)) continue
    const owner = entry.slice(FENCE_PREFIX.length, -7)
    if (entry.at(-7) !== '-' || held(owner)) continue
    // Only a folder of ours (mkdtemp made it, as this user): never what another user put there.
    const where = path.join(os.tmpdir(), entry)
    const st = fs.lstatSync(where, { throwIfNoEntry: false })
    if (!st?.isDirectory() || st.uid !== process.getuid?.()) continue
    fs.rmSync(where, { recursive: true, force: true })
  }
}

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

export class WorkspaceWatcher {
  private child: SpawnedProcess
  private fenceDir: string
  /** The two fence files, open; fence n touches fenceFds[n % 2]. */
  private fenceFds: [number, number]
  /** Fences asked for, and fence events read (each ends the fence of its number). */
  private fences = 0
  private fenced = 0
  private waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>()
  private over = false
  private hooks: WatchHooks
  private root: string

  private constructor(root: string, fenceDir: string, fenceFds: [number, number], child: SpawnedProcess, hooks: WatchHooks) {
    this.root = root
    this.fenceDir = fenceDir
    this.fenceFds = fenceFds
    this.child = child
    this.hooks = hooks
  }

  /** The watcher's process id (tests look for leaks with it). */
  get pid(): number | undefined {
    return this.child.pid
  }

  /**
   * Resolves once every folder below `root` is watched; rejects when it cannot be (no inotifywait,
   * limits reached). `owner` names the sandbox in the fence folder's name, so that a service that
   * died before it could remove the folder has it removed by the next (removeLeftFences).
   */
  static async start(root: string, hooks: WatchHooks, owner: string): Promise<WorkspaceWatcher> {
    const fenceDir = fs.mkdtempSync(path.join(os.tmpdir(), `${FENCE_PREFIX}${owner}-`))
    // Made before inotifywait starts: their creation is never an event.
    const fenceFds: [number, number] = [-1, -1]
    try {
      for (const i of [0, 1] as const) fenceFds[i] = fs.openSync(path.join(fenceDir, FENCE_FILES[i]), 'w')
    } catch (err) {
      for (const fd of fenceFds) if (fd >= 0) fs.closeSync(fd)
      fs.rmSync(fenceDir, { recursive: true, force: true })
      throw err
    }
    // Events below .git and node_modules folders are dropped by inotifywait (their folders are
    // still watched: the regex filters events, not the recursion), not those of a file so named
    // (a worktree's `.git` file is the agent's); -P: links are never followed.
    const exclude = `^${escapeRegex(root)}/(.*/)?(\\.git|node_modules)/`
    const args = ['-m', '-r', '-P', '--format', '%e %w%f%0', '--no-newline', '--exclude', exclude, ...EVENTS.flatMap((e) => ['-e', e]), root, fenceDir]
    // Killed with its parent, the spawner, which ends with the service (a parent-death signal that
    // survives the exec): a crash leaves no watcher behind holding an inotify instance. Started by
    // the spawner so that the service's event loop never pays for a fork of the service.
    const child = spawnDetached('setpriv', ['--pdeathsig', 'KILL', '--', 'inotifywait', ...args], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, pipes: 3 })
    const watcher = new WorkspaceWatcher(root, fenceDir, fenceFds, child, hooks)
    try {
      await watcher.established()
    } catch (err) {
      watcher.close()
      throw err
    }
    return watcher
  }

  /** Resolves once every change made before the call has been passed to `changed`; rejects when the watcher is lost. */
  fence(): Promise<void> {
    if (this.over) return Promise.reject(new Error('the watcher is closed'))
    const n = ++this.fences
    const done = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => this.end(`no fence event within ${FENCE_TIMEOUT_MS} ms`), FENCE_TIMEOUT_MS)
      this.waiting.set(n, { resolve, reject, timer })
    })
    try {
      fs.futimesSync(this.fenceFds[n % 2]!, n, n)
    } catch (err) {
      this.end(`the fence could not be written: ${(err as Error).message}`)
    }
    return done
  }

  /**
   * The inode numbers of every folder inotifywait watches now, read from its inotify fd's fdinfo;
   * null when they cannot be read (the process gone). inotifywait adds a new folder's watch after
   * scanning it for subfolders, so a subfolder made in between (`mkdir -p a/b`) is never watched:
   * the caller finds such folders with this and looks at them itself.
   */
  watchedInodes(): Set<number> | null {
    const pid = this.child.pid
    if (!pid) return null
    try {
      // Found once (listing its fds cost most of a count, asked at every sync): inotifywait opens
      // one inotify fd at its start and keeps it; its fdinfo names the watches.
      this.inotifyFd ??= fs.readdirSync(`/proc/${pid}/fd`).find((fd) => fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === 'anon_inode:inotify') ?? null
      if (this.inotifyFd === null) return null
      const out = new Set<number>()
      for (const m of fs.readFileSync(`/proc/${pid}/fdinfo/${this.inotifyFd}`, 'utf8').matchAll(/^inotify wd:\S+ ino:([0-9a-f]+) /gm)) out.add(parseInt(m[1]!, 16))
      return out
    } catch {
      /* gone meanwhile */
    }
    return null
  }
  /** The watcher's inotify fd (its number, a name in /proc/<pid>/fd), once found. */
  private inotifyFd: string | null | undefined = undefined

  /** Stops the process and removes the fence folder. Idempotent. */
  close(): void {
    this.over = true
    for (const w of this.waiting.values()) {
      clearTimeout(w.timer)
      w.reject(new Error('the watcher is closed'))
    }
    this.waiting.clear()
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL')
    for (const fd of this.fenceFds) if (fd >= 0) fs.closeSync(fd)
    this.fenceFds = [-1, -1]
    fs.rmSync(this.fenceDir, { recursive: true, force: true })
  }

  private end(reason: string): void {
    if (this.over) return
    this.close()
    this.hooks.lost(reason)
  }

  private async established(): Promise<void> {
    await this.child.opened
    // It reads nothing.
    this.child.stdin!.end()
    return new Promise((resolve, reject) => {
      let ready = false
      let said = ''
      // A tree so large that setting up its watches takes this long is walked instead.
      const slow = setTimeout(() => reject(new Error(`inotifywait set up no watches within ${START_TIMEOUT_MS} ms`)), START_TIMEOUT_MS)
      this.child.once('error', (err) => (ready ? this.end(err.message) : reject(err)))
      this.child.once('exit', (code, signal) => {
        const why = `inotifywait exited (${signal ?? code}): ${said.trim()}`
        clearTimeout(slow)
        if (ready) this.end(why)
        else reject(new Error(why))
      })
      this.child.stderr!.setEncoding('utf8')
      this.child.stderr!.on('data', (s: string) => {
        if (ready) return this.end(`inotifywait: ${s.trim()}`)
        said += s
        // Anything said after this line is trouble (a new folder it could not watch, say).
        if (said.includes('Watches established.')) {
          ready = true
          clearTimeout(slow)
          resolve()
        }
      })
      let rest: Buffer = Buffer.alloc(0)
      this.child.stdout!.on('data', (chunk: Buffer) => {
        rest = rest.length ? Buffer.concat([rest, chunk]) : chunk
        let start = 0
        for (let nul = rest.indexOf(0, start); nul !== -1; nul = rest.indexOf(0, start)) {
          this.event(rest.toString('utf8', start, nul))
          start = nul + 1
        }
        rest = rest.subarray(start)
      })
    })
  }

  /** One record: `EVENT[,EVENT…] /host/path` (names may hold spaces and newlines, never NUL). */
  private event(record: string): void {
    if (this.over) return
    const space = record.indexOf(' ')
    const events = record.slice(0, space).split(',')
    const where = record.slice(space + 1)
    if (events.includes('Q_OVERFLOW')) return this.end('the inotify queue overflowed')
    if (where.startsWith(this.fenceDir + '/')) return this.fenceEvent(where.slice(this.fenceDir.length + 1), events)
    const rel = where === this.root || where === `${this.root}/` ? '' : where.startsWith(`${this.root}/`) ? where.slice(this.root.length + 1) : null
    if (rel === null) return
    if (rel === '' && events.some((e) => e === 'DELETE_SELF' || e === 'MOVE_SELF' || e === 'UNMOUNT')) return this.end('the workspace folder itself went')
    // A watched folder's own events: its parent's watch reports what matters.
    if (events.some((e) => e.endsWith('_SELF')) || rel.endsWith('/')) return
    const appearedOrWent = events.some((e) => e === 'CREATE' || e === 'DELETE' || e === 'MOVED_FROM' || e === 'MOVED_TO')
    if (events.includes('ISDIR') && !appearedOrWent) return
    this.hooks.changed(rel, events.includes('ISDIR'))
  }

  private fenceEvent(name: string, events: string[]): void {
    // Its files or folder removed from outside (a tmp cleaner): no fence could be told again.
    if (events.some((e) => e === 'DELETE' || e === 'MOVED_FROM' || e.endsWith('_SELF'))) return this.end(`the fence ${name ? `file "${name}"` : 'folder'} went`)
    if (name === '' || !events.includes('ATTRIB')) return
    const n = ++this.fenced
    // Touches come back in the order they were made, one event each: anything else means events
    // were lost or merged, and no later fence could be trusted.
    if (name !== FENCE_FILES[n % 2]) return this.end(`fence ${n} came back as a touch of "${name}"`)
    const w = this.waiting.get(n)
    if (!w) return
    clearTimeout(w.timer)
    this.waiting.delete(n)
    w.resolve()
  }
}
