import type { Deps } from '../deps.ts'
import { MIB } from '../http/limits.ts'
import { withEvents } from '../events/record-event.ts'
import { openWorkspaceFile } from '../sandbox/local/workspace-files.ts'
import { newId } from '../shared/ids.ts'
import { isSessionDeleted } from '../sessions/sessions.store.ts'
import { BlobTooLarge, type BlobStore } from './blob-store.ts'
import { changedPaths, finishPublication, insertArtifacts, type ArtifactRow, type Skipped } from './artifacts.store.ts'
import { contentTypeOf } from './content-type.ts'

/** Limits: one published artifact, and one turn's published artifacts. */
export const MAX_ARTIFACT_BYTES = 200 * MIB
export const MAX_TURN_ARTIFACT_BYTES = 500 * MIB

/** Never published: version-control internals and installed dependencies (decisions §3). */
const excluded = (p: string) => p.split('/').some((part) => part === '.git' || part === 'node_modules')

export type PublishDeps = Pick<Deps, 'store' | 'bus' | 'workspaces'> & { blobs: BlobStore }
type Turn = { id: string; session_id: string; org_id: string }

/**
 * Publishes what a settled turn left: every regular file it created or modified that still
 * exists (decisions §3), copied into the blob store with its size, sha256 and type. Files are read
 * through the workspace's link-refusing access, so a symbolic link never makes the service read
 * outside the workspace (a link is not a regular file, and is not published). Over a ceiling a
 * file is skipped with the reason, and the turn's `artifacts` ends `partial`. The records, their
 * `artifact.created` events and the turn's final state are written in one transaction.
 */
export async function publishTurn(deps: PublishDeps, turn: Turn): Promise<void> {
  const { store, bus } = deps
  if (await isSessionDeleted(store.db, turn.session_id)) {
    await finishPublication(store.db, turn.id, 'failed', [])
    return
  }
  const root = deps.workspaces.workspaceDir(turn.session_id)
  const published: ArtifactRow[] = []
  const skipped: Skipped[] = []
  let total = 0
  let failed = false
  let ceiling = ''
  for (const path of await changedPaths(store.db, turn.id)) {
    if (excluded(path)) continue
    let fh
    try {
      fh = await openWorkspaceFile(root, path)
    } catch {
      continue // a link, a folder, a device: not a regular file, so not an artifact
    }
    if (!fh) continue // gone by the time the turn settled
    try {
      const size = (await fh.stat()).size
      if (size > MAX_ARTIFACT_BYTES) {
        skipped.push({ path, reason: `${size} bytes is over the 200 MiB ceiling for one artifact` })
        continue
      }
      if (total + size > MAX_TURN_ARTIFACT_BYTES) {
        skipped.push({ path, reason: `over the 500 MiB ceiling for one turn's artifacts (${total} bytes published before it)` })
        continue
      }
      // Read through the handle: the bytes are the file that was checked, whatever the path is now.
      const room = Math.min(MAX_ARTIFACT_BYTES, MAX_TURN_ARTIFACT_BYTES - total)
      ceiling = room === MAX_ARTIFACT_BYTES ? 'the 200 MiB ceiling for one artifact' : "the 500 MiB ceiling for one turn's artifacts"
      const blob = await deps.blobs.put(fh.createReadStream({ autoClose: false, highWaterMark: MIB }), room)
      total += blob.size
      published.push({
        id: newId('art'),
        org_id: turn.org_id,
        session_id: turn.session_id,
        turn_id: turn.id,
        path,
        size_bytes: blob.size,
        sha256: blob.sha256,
        content_type: contentTypeOf(path),
        blob_key: blob.key,
        created_at: Date.now(),
      })
    } catch (err) {
      // It grew past a ceiling while being copied, or could not be read.
      if (err instanceof BlobTooLarge) skipped.push({ path, reason: `it grew past ${ceiling} while being published` })
      else {
        skipped.push({ path, reason: `could not be read: ${(err as Error).message}` })
        failed = true
      }
    } finally {
      await fh.close()
    }
  }
  const state = skipped.length === 0 ? 'ready' : failed && published.length === 0 ? 'failed' : 'partial'
  await withEvents(store, bus, async (trx, record) => {
    // Another process finished this turn first: keep nothing of ours.
    if (!(await finishPublication(trx, turn.id, state, state === 'ready' ? [] : skipped))) return
    await insertArtifacts(trx, published)
    for (const a of published) {
      await record({ orgId: turn.org_id, sessionId: turn.session_id, turnId: turn.id, type: 'artifact.created', payload: { id: a.id, path: a.path, size_bytes: a.size_bytes, turn_id: turn.id } })
    }
  })
}
