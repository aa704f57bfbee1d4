import type { FileStamp, WorkspaceSnapshot } from '../sandbox.ts'

type Folder = { files: Map<string, FileStamp>; folders: Map<string, Folder> }
const folder = (): Folder => ({ files: new Map(), folders: new Map() })

/**
 * Stamps of regular files by workspace path, held as a tree so that everything below a folder can
 * be taken out at once (a folder removed or renamed) without going through every path. Paths are
 * also found by inode: a write through one hard link changes every other link's stamp, and the
 * watcher names only the path written through.
 */
export class FileTree {
  private root = folder()
  private byIno = new Map<number, Set<string>>()

  get(path: string): FileStamp | undefined {
    const parts = path.split('/')
    return this.find(parts.slice(0, -1))?.files.get(parts.at(-1)!)
  }

  set(path: string, stamp: FileStamp): void {
    const parts = path.split('/')
    let at = this.root
    for (const name of parts.slice(0, -1)) {
      let next = at.folders.get(name)
      if (!next) at.folders.set(name, (next = folder()))
      at = next
    }
    const was = at.files.get(parts.at(-1)!)
    if (was && was.ino !== stamp.ino) this.unindex(was.ino, path)
    at.files.set(parts.at(-1)!, stamp)
    let paths = this.byIno.get(stamp.ino)
    if (!paths) this.byIno.set(stamp.ino, (paths = new Set()))
    paths.add(path)
  }

  /** The other paths known to share `ino` with `path` (its hard links). */
  linksOf(ino: number, path: string): string[] {
    const paths = this.byIno.get(ino)
    return paths && paths.size > 1 ? [...paths].filter((p) => p !== path) : []
  }

  /** Removes and returns the file at `parts` and every file below the folder at `parts` ([]: everything). */
  take(parts: string[]): WorkspaceSnapshot {
    const out: WorkspaceSnapshot = new Map()
    if (parts.length === 0) {
      collect(this.root, '', out)
      this.root = folder()
      this.byIno.clear()
      return out
    }
    const parent = this.find(parts.slice(0, -1))
    if (!parent) return out
    const name = parts.at(-1)!
    const path = parts.join('/')
    const file = parent.files.get(name)
    if (file) out.set(path, file)
    parent.files.delete(name)
    const below = parent.folders.get(name)
    if (below) collect(below, `${path}/`, out)
    parent.folders.delete(name)
    for (const [p, stamp] of out) this.unindex(stamp.ino, p)
    return out
  }

  private unindex(ino: number, path: string): void {
    const paths = this.byIno.get(ino)
    paths?.delete(path)
    if (paths?.size === 0) this.byIno.delete(ino)
  }

  private find(parts: string[]): Folder | undefined {
    let at: Folder | undefined = this.root
    for (const name of parts) at = at?.folders.get(name)
    return at
  }
}

function collect(at: Folder, prefix: string, out: WorkspaceSnapshot): void {
  for (const [name, stamp] of at.files) out.set(prefix + name, stamp)
  for (const [name, sub] of at.folders) collect(sub, `${prefix}${name}/`, out)
}
