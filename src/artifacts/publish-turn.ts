import type { Db } from '../db/database.ts'
import type { Deps } from '../deps.ts'
import { MIB } from '../http/limits.ts'
import { withEvents } from '../events/record-event.ts'
import { SandboxPathError } from '../sandbox/sandbox.ts'
import { newId } from '../shared/ids.ts'
import { isSessionDeleted } from '../sessions/sessions.store.ts'
import { BlobTooLarge, type BlobStore } from './blob-store.ts'
import { changedPaths, finishPublication, insertArtifacts, orgArtifactBytes, type ArtifactRow, type Skipped } from './artifacts.store.ts'
import { contentTypeOf } from './content-type.ts'

/** Limits: one published artifact, and one turn's published artifacts (the specification's; the deployment may lower the second). */
export const MAX_ARTIFACT_BYTES = 200 * MIB
export const MAX_TURN_ARTIFACT_BYTES = 500 * MIB

/** Never published: version-control internals and installed dependencies (decisions §3). */
const excluded = (p: string) => p.split('/').some((part) => part === '.git' || part === 'node_modules')

/** `orgBytes`: everything an organization keeps (artifacts outlive their workspace); none when absent. */
export type ArtifactLimits = { fileBytes: number; turnBytes: number; orgBytes?: number }
export const ARTIFACT_LIMITS: ArtifactLimits = { fileBytes: MAX_ARTIFACT_BYTES, turnBytes: MAX_TURN_ARTIFACT_BYTES }
const mib = (n: number) => (n % MIB === 0 ? `${n / MIB} MiB` : `${n} bytes`)

export type PublishDeps = Pick<Deps, 'store' | 'bus' | 'workspaces'> & { blobs: BlobStore; limits?: ArtifactLimits }
type Turn = { id: string; session_id: string; org_id: string }

/**
 * Publishes what a settled turn left: every regular file it created or modified that still
 * exists (decisions §3), copied into the blob store with its size, sha256 and type. Files are read
 * through the sandbox seam's workspace reads, which need no live sandbox (the turn's may be
 * paused or reclaimed by now, or gone with a restart) and refuse links, so a symbolic link never
 * makes the service read outside the workspace (a link is not a regular file, and is not
 * published). Over a ceiling a file is skipped with the reason, and the turn's `artifacts` ends
 * `partial`. The records, their `artifact.created` events and the turn's final state are written
 * in one transaction. Never throws: a failure of the stores ends the publication `failed`.
 *
 * `signal` ends it early (the service stops): between two files, nothing recorded, the turn's
 * `artifacts` left `pending` as after a crash, for whoever takes the session up next to publish
 * from the start (publishPending); the blobs already copied are content-addressed, so that
 * publication finds them in place.
 */
export async function publishTurn(deps: PublishDeps, turn: Turn, signal?: AbortSignal): Promise<void> {
  try {
    await publish(deps, turn, signal)
  } catch (err) {
    if (err instanceof Interrupted) return
    // The store or the blob store failed: the turn's publication failed, and says so.
    await finishPublication(deps.store.db, turn.id, 'failed', []).catch(() => {})
  }
}

class Interrupted extends Error {}

async function publish(deps: PublishDeps, turn: Turn, signal?: AbortSignal): Promise<void> {
  const { store, bus } = deps
  const limits = deps.limits ?? ARTIFACT_LIMITS
  if (await isSessionDeleted(store.db, turn.session_id)) {
    await finishPublication(store.db, turn.id, 'failed', [])
    return
  }
  const files = deps.workspaces.files(turn.session_id)
  const published: ArtifactRow[] = []
  const skipped: Skipped[] = []
  let total = 0
  const orgBytes = limits.orgBytes ?? Infinity
  const stored = orgBytes === Infinity ? 0 : await orgArtifactBytes(store.db, turn.org_id)
  const overOrg = (used: number) => `over the organization's ${mib(orgBytes)} ceiling for stored artifacts (${used} bytes stored)`
  let unreadable = 0
  let ceiling = ''
  for (const path of await changedPaths(store.db, turn.id)) {
    if (signal?.aborted) throw new Interrupted()
    if (excluded(path)) continue
    let opened
    try {
      opened = await files.openRead(path)
    } catch (err) {
      // A link, a folder, a device: not a regular file, so not an artifact.
      if (err instanceof SandboxPathError) continue
      skipped.push({ path, reason: `could not be read: ${(err as Error).message}` })
      unreadable++
      continue
    }
    if (!opened) continue // gone by the time the turn settled
    const { size, stream } = opened
    try {
      if (size > limits.fileBytes) {
        skipped.push({ path, reason: `${size} bytes is over the ${mib(limits.fileBytes)} ceiling for one artifact` })
        continue
      }
      if (total + size > limits.turnBytes) {
        skipped.push({ path, reason: `over the ${mib(limits.turnBytes)} ceiling for one turn's artifacts (${total} bytes published before it)` })
        continue
      }
      if (stored + total + size > orgBytes) {
        skipped.push({ path, reason: overOrg(stored + total) })
        continue
      }
      const room = Math.min(limits.fileBytes, limits.turnBytes - total, orgBytes - stored - total)
      ceiling =
        room === limits.fileBytes ? `the ${mib(limits.fileBytes)} ceiling for one artifact`
        : room === limits.turnBytes - total ? `the ${mib(limits.turnBytes)} ceiling for one turn's artifacts`
        : `the organization's ${mib(orgBytes)} ceiling for stored artifacts`
      // The stream reads the file that was checked, whatever the path is now.
      const blob = await deps.blobs.put(stream, room)
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
      if (err instanceof BlobTooLarge) skipped.push({ path, reason: `it grew past ${ceiling} while being published` })
      else {
        skipped.push({ path, reason: `could not be read: ${(err as Error).message}` })
        unreadable++
      }
    } finally {
      // Ends the file's use whether or not it was read to the end.
      stream.destroy()
    }
  }
  // Failed: nothing could be read at all. Partial: something was left behind, for a reason given.
  const state = skipped.length === 0 ? 'ready' : unreadable === skipped.length && published.length === 0 ? 'failed' : 'partial'
  await withEvents(store, bus, async (trx, record) => {
    // Deleted while its files were being copied: nothing of it is kept.
    if (await isSessionDeleted(trx, turn.session_id)) return finishPublication(trx, turn.id, 'failed', [])
    // Another process finished this turn first: keep nothing of ours.
    // Another turn of the organization may have published meanwhile: what no longer fits goes.
    const kept = orgBytes === Infinity ? published : await withinOrgCeiling(trx, published, skipped, orgBytes, overOrg)
    const final = kept.length < published.length ? 'partial' : state
    if (!(await finishPublication(trx, turn.id, final, final === 'partial' ? skipped : []))) return
    await insertArtifacts(trx, kept)
    for (const a of kept) {
      await record({ orgId: turn.org_id, sessionId: turn.session_id, turnId: turn.id, type: 'artifact.created', payload: { id: a.id, path: a.path, size_bytes: a.size_bytes, turn_id: turn.id } })
    }
  })
}

/** The artifacts that still fit under the organization's ceiling, read again in the final transaction; the rest are added to `skipped`. */
async function withinOrgCeiling(db: Db, published: ArtifactRow[], skipped: Skipped[], orgBytes: number, overOrg: (used: number) => string): Promise<ArtifactRow[]> {
  let used = published.length ? await orgArtifactBytes(db, published[0]!.org_id) : 0
  const kept: ArtifactRow[] = []
  for (const a of published) {
    const size = Number(a.size_bytes)
    if (used + size > orgBytes) skipped.push({ path: a.path, reason: overOrg(used) })
    else {
      kept.push(a)
      used += size
    }
  }
  return kept
}
