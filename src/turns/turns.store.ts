import type { Selectable } from 'kysely'
import { prepared, preparedWrite } from '../db/prepared.ts'
import type { Db } from '../db/database.ts'
import type { Tables } from '../db/tables.ts'
import { fromJson, toJson } from '../shared/json.ts'
import type { Turn, TurnError, TurnStatus } from './turns.schema.ts'

export type TurnRow = Selectable<Tables['turns']>

const sessionTurns = (db: Db, sessionId: string) => db.selectFrom('turns').selectAll().where('session_id', '=', sessionId)

/** Who an event of this turn belongs to, as the event log records it. */
export const turnEventScope = (turn: Pick<TurnRow, 'org_id' | 'session_id' | 'id'>) => ({ orgId: turn.org_id, sessionId: turn.session_id, turnId: turn.id })

export function toTurn(row: TurnRow): Turn {
  return {
    object: 'turn',
    id: row.id,
    session_id: row.session_id,
    status: row.status as TurnStatus,
    created_at: Number(row.created_at),
    started_at: row.started_at === null ? null : Number(row.started_at),
    completed_at: row.completed_at === null ? null : Number(row.completed_at),
    artifacts: row.artifacts as Turn['artifacts'],
    artifacts_skipped: fromJson(row.artifacts_skipped, []),
    subagent_id: null,
    error: row.error === null ? null : fromJson<TurnError>(row.error, { code: 'internal_error', message: '' }),
  }
}

/**
 * Writes an accepted turn. `created_at` is kept strictly increasing within a session, so that
 * the list order (created_at, id) is the order the input arrived in even within one millisecond.
 */
export async function insertTurn(db: Db, t: { id: string; sessionId: string; orgId: string; text: string; queuedPosition: number | null; now: number }): Promise<TurnRow> {
  const last = await sessionTurns(db, t.sessionId).orderBy('ordinal', 'desc').limit(1).executeTakeFirst()
  const row: TurnRow = {
    id: t.id,
    session_id: t.sessionId,
    org_id: t.orgId,
    ordinal: (last?.ordinal ?? 0) + 1,
    status: 'working',
    text: t.text,
    created_at: Math.max(t.now, Number(last?.created_at ?? 0) + 1),
    started_at: null,
    completed_at: null,
    error: null,
    artifacts: null,
    artifacts_skipped: '[]',
    cancel_requested: 0,
    steps: 0,
    running_call: null,
    queued_position: t.queuedPosition,
  }
  await db.insertInto('turns').values(row).execute()
  return row
}

export async function getTurnRow(db: Db, sessionId: string, id: string): Promise<TurnRow | null> {
  return (await sessionTurns(db, sessionId).where('id', '=', id).executeTakeFirst()) ?? null
}

export function sessionTurnsQuery(db: Db, sessionId: string) {
  return sessionTurns(db, sessionId)
}

/** The session's working turns in queue order: the running one (started) first, then the waiting ones. */
export async function workingTurns(db: Db, sessionId: string): Promise<TurnRow[]> {
  return workingOf(db, sessionId)
}
const workingOf = prepared((db, sessionId: string) => sessionTurns(db, sessionId).where('status', '=', 'working').orderBy('ordinal'))

/** False when the turn was settled (cancelled) or started meanwhile. */
export async function markTurnStarted(db: Db, id: string, now: number): Promise<boolean> {
  const r = await db.updateTable('turns').set({ started_at: now }).where('id', '=', id).where('started_at', 'is', null).where('status', '=', 'working').executeTakeFirst()
  return Number(r.numUpdatedRows) > 0
}

/** Counts a model step of a working turn: its number, or null when the turn settled meanwhile (nothing changed). */
export async function countStep(db: Db, id: string): Promise<number | null> {
  const [row] = await nextStep(db, id)
  return row ? Number(row.steps) : null
}
const nextStep = prepared((db, id: string) => db.updateTable('turns').set((eb) => ({ steps: eb('steps', '+', 1) })).where('id', '=', id).where('status', '=', 'working').returning('steps'))

/** One model call of a turn, with what it cost (the usage reports read these). */
export type ModelStepRecord = { turnId: string; step: number; sessionId: string; orgId: string; model: string; credentialId: string; inputTokens: number; outputTokens: number; now: number }

export async function insertModelStep(db: Db, s: ModelStepRecord): Promise<void> {
  await modelStepRow(db, s.turnId, s.step, s.sessionId, s.orgId, s.model, s.credentialId, s.inputTokens, s.outputTokens, s.now)
}
const modelStepRow = preparedWrite(
  (db, turnId: string, step: number, sessionId: string, orgId: string, model: string, credentialId: string, inputTokens: number, outputTokens: number, now: number) =>
    db.insertInto('model_steps').values({ turn_id: turnId, step, session_id: sessionId, org_id: orgId, model, model_credential_id: credentialId, input_tokens: inputTokens, output_tokens: outputTokens, created_at: now }),
)

/** Settles a working turn; returns false when it had already settled (a settled turn never moves). */
export async function settleTurnRow(db: Db, id: string, status: Exclude<TurnStatus, 'working'>, error: TurnError | null, now: number): Promise<boolean> {
  const r = await db
    .updateTable('turns')
    // Publication of its files begins with the settle (the artifact publisher takes it from here).
    .set({ status, completed_at: now, error: error ? toJson(error) : null, artifacts: 'pending' })
    .where('id', '=', id)
    .where('status', '=', 'working')
    .executeTakeFirst()
  return Number(r.numUpdatedRows) > 0
}

export async function requestCancel(db: Db, id: string): Promise<void> {
  await db.updateTable('turns').set({ cancel_requested: 1 }).where('id', '=', id).execute()
}

export async function setRunningCall(db: Db, id: string, callId: string | null): Promise<void> {
  await runningCall(db, id, callId)
}
const runningCall = preparedWrite((db, id: string, callId: string | null) => db.updateTable('turns').set({ running_call: callId }).where('id', '=', id))

/** Ends the running call of a working turn; false when the turn settled meanwhile (nothing changed). */
export async function endRunningCall(db: Db, id: string): Promise<boolean> {
  return (await noRunningCall(db, id)) > 0
}
const noRunningCall = preparedWrite((db, id: string) => db.updateTable('turns').set({ running_call: null }).where('id', '=', id).where('status', '=', 'working'))

/**
 * Deleting a session cancels its turns; nothing is left working on a session that is gone. The
 * rows as they were: what each still waited on is the caller's to close.
 */
export async function cancelSessionTurns(db: Db, sessionId: string, now: number): Promise<TurnRow[]> {
  const working = await workingTurns(db, sessionId)
  // The session's files go with it, so nothing of these turns can be published.
  await db.updateTable('turns').set({ status: 'cancelled', completed_at: now, running_call: null, artifacts: 'failed' }).where('session_id', '=', sessionId).where('status', '=', 'working').execute()
  return working
}
