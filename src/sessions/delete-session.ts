import type { Deps } from '../deps.ts'
import { withEvents } from '../events/record-event.ts'
import { deleteSeedFiles } from '../files/seed-files.store.ts'
import { withdrawPreview } from '../previews/previews.store.ts'
import { cancelSessionTurns } from '../turns/turns.store.ts'
import { closeOpenCalls } from '../runner/close-open-calls.ts'
import { requireSession } from './require-session.ts'
import { markSessionDeleted } from './sessions.store.ts'
import { deleteSessionArtifacts, releaseArtifactBlobs } from '../artifacts/artifacts.store.ts'
import { silentLog, type Log } from '../shared/log.ts'

/**
 * Deletes a session: marks it deleted, cancels its turns (what each waited on closed, then its
 * `turn.ended` and `turn.failed`), drops its seed files and preview (its name held for the
 * organization) and its artifacts, and records `session.deleted`, in one transaction. Only after
 * the commit are its runner, preview connections and workspace let go, so a failed delete leaves
 * a session that still works; its slot is free from the commit on.
 */
export async function deleteSession(deps: Pick<Deps, 'store' | 'bus' | 'node' | 'previews' | 'metrics' | 'config' | 'blobs'> & { log?: Log }, orgId: string, id: string): Promise<void> {
  const { store, bus, node, previews } = deps
  let blobKeys: string[] = []
  const cancelled = await withEvents(store, bus, async (trx, record) => {
    await requireSession(trx, orgId, id)
    const now = Date.now()
    await markSessionDeleted(trx, id, now)
    const turns = await cancelSessionTurns(trx, id, now)
    for (const t of turns) {
      await closeOpenCalls(trx, record, t, 'deleted', now)
      await record({ orgId, sessionId: id, turnId: t.id, type: 'turn.ended', payload: { turnId: t.id } })
      await record({ orgId, sessionId: id, turnId: t.id, type: 'turn.failed', payload: { session_id: id, turn_id: t.id, status: 'cancelled' } })
    }
    await deleteSeedFiles(trx, id)
    // Nothing serves a deleted session's artifacts: they leave the organization's total with this commit.
    blobKeys = await deleteSessionArtifacts(trx, id)
    await withdrawPreview(trx, id, now + deps.config.previewNameHoldMs, now)
    await record({ orgId, sessionId: id, type: 'session.deleted', payload: { session_id: id } })
    return turns.length
  })
  // Settled here, not by the runner: counted with the turns it settles.
  if (cancelled > 0) deps.metrics.turnsSettled.inc({ outcome: 'cancelled' }, cancelled)
  previews.cut(id)
  // Their bytes, unless another artifact names them. Left behind on a failure (logged): the session is deleted all the same.
  await releaseArtifactBlobs(store, deps.blobs, blobKeys).catch((err) => (deps.log ?? silentLog).warn({ err, component: 'artifacts', session: id }, "releasing a deleted session's artifact bytes failed"))
  // The node that owns it lets go of its driver, sandbox and files, wherever that is.
  await node.deleted(id)
}
