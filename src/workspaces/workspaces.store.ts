import type { Db } from '../db/database.ts'
import { newId } from '../shared/ids.ts'
import { fromJson, toJson } from '../shared/json.ts'
import type { StoredAgent, StoredEnvironment } from '../sessions/sessions.store.ts'

/**
 * The values of `environment.state`:
 * - pending: the workspace is owed (the 201 does not wait for it) or is coming up;
 * - running: its sandbox runs;
 * - paused: frozen after the idle pause; the next input, upload or preview request resumes it;
 * - reclaimed: its sandbox was reclaimed (lifetime ceiling, or a service restart); the files are
 *   kept and the next input restores them into a fresh sandbox;
 * - failed: it could not be brought up or restored (see the workspace.recovery_failed event);
 * - deleted: the session was deleted.
 */
export type WorkspaceState = 'pending' | 'running' | 'paused' | 'reclaimed' | 'failed' | 'deleted'

/** What the service keeps of a workspace beyond the response fields. */
export type WorkspaceRecord = StoredEnvironment & {
  /** Seed files, clone and setup are done once, when the workspace first comes up. */
  initialized?: boolean
  /** Running time used toward the lifetime ceiling, in ms, as of the last pause or stop. */
  used_ms?: number
}

export type LiveSession = { id: string; orgId: string; env: WorkspaceRecord; agent: StoredAgent }

type Row = { id: string; org_id: string; environment: string; agent: string }
const toLive = (r: Row): LiveSession => ({
  id: r.id,
  orgId: r.org_id,
  env: fromJson<WorkspaceRecord>(r.environment, {} as WorkspaceRecord),
  agent: fromJson<StoredAgent>(r.agent, {} as StoredAgent),
})

export async function getWorkspace(db: Db, sessionId: string): Promise<LiveSession | null> {
  const row = await db.selectFrom('sessions').select(['id', 'org_id', 'environment', 'agent']).where('id', '=', sessionId).where('deleted_at', 'is', null).executeTakeFirst()
  return row ? toLive(row) : null
}

/** Merges `patch` into the stored environment and moves updated_at (any change moves it). */
export async function patchWorkspace(db: Db, sessionId: string, patch: Partial<WorkspaceRecord>, now = Date.now()): Promise<void> {
  const row = await db.selectFrom('sessions').select('environment').where('id', '=', sessionId).executeTakeFirst()
  if (!row) return
  const env = { ...fromJson<WorkspaceRecord>(row.environment, {} as WorkspaceRecord), ...patch }
  await db.updateTable('sessions').set({ environment: toJson(env), updated_at: now }).where('id', '=', sessionId).execute()
}

/** Sessions whose workspace the service should know about at start (not deleted). */
export async function listLiveWorkspaces(db: Db): Promise<LiveSession[]> {
  const rows = await db.selectFrom('sessions').select(['id', 'org_id', 'environment', 'agent']).where('deleted_at', 'is', null).execute()
  return rows.map(toLive)
}

export async function openInterval(db: Db, orgId: string, sessionId: string, startedAt: number): Promise<void> {
  await db
    .insertInto('usage_intervals')
    .values({ id: newId('int'), org_id: orgId, session_id: sessionId, started_at: startedAt, ended_at: null, reconciled: 0, billable: 1, needs_review: 0 })
    .execute()
}

/** Closes the session's open interval; the local provider's clock is the reconciliation. */
export async function closeInterval(db: Db, sessionId: string, endedAt: number): Promise<void> {
  await db
    .updateTable('usage_intervals')
    .set({ ended_at: endedAt, reconciled: 1 })
    .where('session_id', '=', sessionId)
    .where('ended_at', 'is', null)
    .where('needs_review', '=', 0)
    .execute()
}

/**
 * After its owner died nobody knows when the session's open intervals ended: they are marked for
 * review, not summed.
 */
export async function markOpenIntervalsForReview(db: Db, sessionId: string): Promise<number> {
  const r = await db.updateTable('usage_intervals').set({ needs_review: 1 }).where('session_id', '=', sessionId).where('ended_at', 'is', null).where('needs_review', '=', 0).executeTakeFirst()
  return Number(r.numUpdatedRows)
}
