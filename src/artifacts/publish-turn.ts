import type { Deps } from '../deps.ts'
import { MIB } from '../http/limits.ts'
import type { Db, Store } from '../db/database.ts'
import { withEvents, type Recorder } from '../events/record-event.ts'
import { SandboxPathError } from '../sandbox/sandbox.ts'
import { newId } from '../shared/ids.ts'
import type { Log } from '../shared/log.ts'
import { isSessionDeleted } from '../sessions/sessions.store.ts'
import { BlobTooLarge, type BlobStore } from './blob-store.ts'
import { changedPaths, finishPublication, insertArtifacts, lockArtifactBlobs, orgArtifactBytes, publicationPending, publishedPaths, type ArtifactRow, type Skipped } from './artifacts.store.ts'
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

export type PublishDeps = Pick<Deps, 'store' | 'bus' | 'workspaces'> & { blobs: BlobStore; limits?: ArtifactLimits; log?: Log }
type Turn = { id: string; session_id: string; org_id: string }

/**
 * Artifacts recorded in one transaction at most. A turn's whole list in one (20,000 files, say)
 * held the event loop for seconds, on SQLite its only connection too: every request of every
 * organization waited for it.
 */
export const RECORD_BATCH = 100

/**
 * Publishes what a settled turn left: every regular file it created or modified that still
 * exists (decisions §3), copied into the blob store with its size, sha256 and type. Files are read
 * through the sandbox seam's workspace reads, which need no live sandbox (the turn's may be
 * paused or reclaimed by now, or gone with a restart) and refuse links, so a symbolic link never
 * makes the service read outside the workspace (a link is not a regular file, and is not
 * published). Over a ceiling a file is skipped with the reason, and the turn's `artifacts` ends
 * `partial`. The records and their `artifact.created` events are written RECORD_BATCH at a time
 * while the turn is `pending` (its list may show some of them meanwhile, as the spec allows); the
 * last batch and the turn's final state in one transaction. Never throws: a failure of the stores
 * ends the publication `failed`.
 *
 * `signal` ends it early (the service stops): between two files, the turn's `artifacts` left
 * `pending` as after a crash, for whoever takes the session up next to publish (publishPending).
 * That publication resumes: the paths recorded already are left as they are, and count towards
 * the turn's ceiling; the blobs already copied are content-addressed, so it finds them in place.
 * Two publications of a turn at once record each path once, and the first to finish ends it.
 */
export async function publishTurn(deps: PublishDeps, turn: Turn, signal?: AbortSignal): Promise<void> {
  try {
    await publish(deps, turn, signal)
  } catch (err) {
    if (err instanceof Interrupted) return
    // The store or the blob store failed: the turn's publication failed, and says so.
    deps.log?.warn({ err, component: 'artifacts', turn_id: turn.id }, 'publishing the turn\'s files failed')
    await finishPublication(deps.store.db, turn.id, 'failed', []).catch((err) => deps.log?.warn({ err, component: 'artifacts', turn_id: turn.id }, 'recording the turn\'s publication failed, failed too'))
  }
}

class Interrupted extends Error {}

async function publish(deps: PublishDeps, turn: Turn, signal?: AbortSignal): Promise<void> {
  const { store, bus } = deps
  const blobs: Blobs = { store: deps.blobs, dialect: store.dialect }
  const limits = deps.limits ?? ARTIFACT_LIMITS
  if (await isSessionDeleted(store.db, turn.session_id)) {
    await finishPublication(store.db, turn.id, 'failed', [])
    return
  }
  const files = deps.workspaces.files(turn.session_id)
  const already = await publishedPaths(store.db, turn.id)
  let batch: ArtifactRow[] = []
  let recorded = already.size
  const skipped: Skipped[] = []
  let total = [...already.values()].reduce((n, size) => n + size, 0)
  // The organization's stored bytes (this turn's recorded paths among them), and what this run copied since.
  const org = orgCeiling(limits.orgBytes)
  const stored = org ? await orgArtifactBytes(store.db, turn.org_id) : 0
  let copied = 0
  let unreadable = 0
  let ceiling = ''
  for (const path of await changedPaths(store.db, turn.id)) {
    if (signal?.aborted) throw new Interrupted()
    if (excluded(path) || already.has(path)) continue
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
      const orgRoom = org ? org.bytes - stored - copied : Infinity
      if (size > orgRoom) {
        skipped.push({ path, reason: org!.over(stored + copied) })
        continue
      }
      const room = Math.min(limits.fileBytes, limits.turnBytes - total, orgRoom)
      ceiling =
        room === limits.fileBytes ? `the ${mib(limits.fileBytes)} ceiling for one artifact`
        : room === limits.turnBytes - total ? `the ${mib(limits.turnBytes)} ceiling for one turn's artifacts`
        : `the organization's ${mib(org!.bytes)} ceiling for stored artifacts`
      // The stream reads the file that was checked, whatever the path is now.
      const blob = await deps.blobs.put(stream, room)
      total += blob.size
      copied += blob.size
      batch.push({
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
    if (batch.length >= RECORD_BATCH) {
      const rows = batch
      batch = []
      // Over (finished by another process, or the session deleted): nothing more of ours is kept.
      if (!(await withEvents(store, bus, (trx, record) => recordArtifacts(trx, record, turn, rows, skipped, org, null, blobs)))) return
      recorded += rows.length
    }
  }
  // Failed: nothing could be read at all. Partial: something was left behind, for a reason given.
  const state = skipped.length === 0 ? 'ready' : unreadable === skipped.length && recorded + batch.length === 0 ? 'failed' : 'partial'
  await withEvents(store, bus, (trx, record) => recordArtifacts(trx, record, turn, batch, skipped, org, state, blobs))
}

type OrgCeiling = { bytes: number; over: (used: number) => string }
const orgCeiling = (bytes: number | undefined): OrgCeiling | null =>
  bytes === undefined ? null : { bytes, over: (used) => `over the organization's ${mib(bytes)} ceiling for stored artifacts (${used} bytes stored)` }

/**
 * Records `rows` and their events, but the paths the turn has recorded already and what no longer
 * fits under the organization's ceiling (another turn of it may have published meanwhile: added to
 * `skipped`); with `end` (the state the publication would end in), ends the publication in the same
 * transaction, `partial` if anything was dropped. False, recording nothing, when the publication is
 * over (another process ended it first) or the session was deleted (ended `failed` then).
 */
async function recordArtifacts(trx: Db, record: Recorder, turn: Turn, rows: ArtifactRow[], skipped: Skipped[], org: OrgCeiling | null, end: 'ready' | 'partial' | 'failed' | null, blobs: Blobs): Promise<boolean> {
  if (await isSessionDeleted(trx, turn.session_id)) {
    await finishPublication(trx, turn.id, 'failed', [])
    return false
  }
  if (end === null && !(await publicationPending(trx, turn.id))) return false
  // The transactions that record events run one at a time: no other can add a path meanwhile.
  const taken = rows.length ? await publishedPaths(trx, turn.id, rows.map((r) => r.path)) : new Map()
  const unrecorded = rows.filter((r) => !taken.has(r.path))
  const fitting = org ? await withinOrgCeiling(trx, turn.org_id, unrecorded, skipped, org) : unrecorded
  const fresh = await withBytesKept(trx, blobs, fitting, skipped)
  if (end !== null) {
    const state = fresh.length < unrecorded.length ? 'partial' : end
    if (!(await finishPublication(trx, turn.id, state, state === 'partial' ? skipped : []))) return false
  }
  await insertArtifacts(trx, fresh)
  await record.all(fresh.map((a) => ({ orgId: turn.org_id, sessionId: turn.session_id, turnId: turn.id, type: 'artifact.created' as const, payload: { id: a.id, path: a.path, size_bytes: a.size_bytes, turn_id: turn.id } })))
  return true
}

/** The blob store with the dialect its locks are taken in. */
type Blobs = { store: BlobStore; dialect: Store['dialect'] }

/**
 * The rows whose bytes are still stored, each blob locked until the transaction ends (see
 * lockArtifactBlobs): a deleted session's release may have taken bytes equal to a file copied
 * here (the put found them stored). Such a file is skipped, saying so, rather than named without bytes.
 */
async function withBytesKept(trx: Db, blobs: Blobs, rows: ArtifactRow[], skipped: Skipped[]): Promise<ArtifactRow[]> {
  if (rows.length === 0) return rows
  const keys = [...new Set(rows.map((r) => r.blob_key))]
  // One statement each, not two a file: this transaction holds up every other that records events.
  await lockArtifactBlobs(trx, blobs.dialect, keys)
  const stored = await blobs.store.existing(keys)
  const gone = new Set(keys.filter((k) => !stored.has(k)))
  if (gone.size === 0) return rows
  for (const r of rows) if (gone.has(r.blob_key)) skipped.push({ path: r.path, reason: 'its stored copy was removed while it was published (another session deleted); publish it again' })
  return rows.filter((r) => !gone.has(r.blob_key))
}

/** The rows that still fit under the organization's ceiling, its bytes read in this transaction; the rest are added to `skipped`. */
async function withinOrgCeiling(db: Db, orgId: string, rows: ArtifactRow[], skipped: Skipped[], org: OrgCeiling): Promise<ArtifactRow[]> {
  if (rows.length === 0) return rows
  let used = await orgArtifactBytes(db, orgId)
  const kept: ArtifactRow[] = []
  for (const a of rows) {
    const size = Number(a.size_bytes)
    if (used + size > org.bytes) skipped.push({ path: a.path, reason: org.over(used) })
    else {
      kept.push(a)
      used += size
    }
  }
  return kept
}
