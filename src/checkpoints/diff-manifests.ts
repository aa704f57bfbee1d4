import { contentsOf, manifestContents, type Manifest, type ManifestEntry } from './manifest.ts'

/** What a checkpoint changed, as its API object shows it. */
export type ManifestDiff = {
  /** Files and links made, removed or changed (contents, mode, target, type); folders are not counted. */
  files_changed: number
  /** Bytes of the contents `after` names and `before` does not (each content once): what it holds new. */
  bytes_added: number
}

/** From `before` (null: the first checkpoint, whose every file is new) to `after`. */
export function diffManifests(before: Manifest | null, after: Manifest): ManifestDiff {
  const was = new Map<string, ManifestEntry>()
  for (const e of before?.entries ?? []) was.set(e.path, e)
  let changed = 0
  for (const e of after.entries) {
    const old = was.get(e.path)
    was.delete(e.path)
    if (e.type === 'dir' && (!old || old.type === 'dir')) continue
    if (!old || !sameEntry(old, e)) changed++
  }
  // What is left was removed: a folder gone is counted by the files that went with it.
  for (const e of was.values()) if (e.type !== 'dir') changed++
  const known = before ? manifestContents(before) : new Map<string, number>()
  let added = 0
  for (const [hash, size] of manifestContents(after)) if (!known.has(hash)) added += size
  return { files_changed: changed, bytes_added: added }
}

function sameEntry(a: ManifestEntry, b: ManifestEntry): boolean {
  if (a.type !== b.type || a.mode !== b.mode) return false
  if (a.type === 'symlink' && b.type === 'symlink') return a.target === b.target
  if (a.type === 'file' && b.type === 'file') return a.hash === b.hash && contentsOf(a).length === contentsOf(b).length
  return true
}
