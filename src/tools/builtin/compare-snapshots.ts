import type { WorkspaceChange, WorkspaceSnapshot } from '../../sandbox/sandbox.ts'

export type SnapshotChange = WorkspaceChange

/**
 * Created, modified (size, mtime or inode differ: a rename over the file counts) and deleted
 * files, sorted by path. A regular file turned into a link or folder reads as deleted.
 */
export function compareSnapshots(before: WorkspaceSnapshot, after: WorkspaceSnapshot): SnapshotChange[] {
  const out: SnapshotChange[] = []
  for (const [p, a] of after) {
    const b = before.get(p)
    if (!b) out.push({ path: p, kind: 'created' })
    else if (b.size !== a.size || b.mtimeMs !== a.mtimeMs || b.ino !== a.ino) out.push({ path: p, kind: 'modified' })
  }
  for (const p of before.keys()) if (!after.has(p)) out.push({ path: p, kind: 'deleted' })
  return out.sort((x, y) => (x.path < y.path ? -1 : x.path > y.path ? 1 : 0))
}
