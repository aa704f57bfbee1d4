import type { Selectable } from 'kysely'
import type { Db } from '../db/database.ts'
import { prepared } from '../db/prepared.ts'
import type { Tables } from '../db/tables.ts'
import { fromJson, toJson } from '../shared/json.ts'

/** approval and question wait on a person; function waits on the caller (a required action). */
export type PendingKind = 'approval' | 'question' | 'function'
export type PendingRow = Selectable<Tables['pending_calls']>

export type PendingCall = {
  sessionId: string
  callId: string
  turnId: string
  orgId: string
  kind: PendingKind
  name: string
  args: unknown
  createdAt: number
  expiresAt: number | null
  status: 'pending' | 'resolved' | 'cancelled'
  answer: unknown
  resolvedAt: number | null
}

export const toPendingCall = (r: PendingRow): PendingCall => ({
  sessionId: r.session_id,
  callId: r.call_id,
  turnId: r.turn_id,
  orgId: r.org_id,
  kind: r.kind as PendingKind,
  name: r.name,
  args: fromJson(r.arguments, null),
  createdAt: Number(r.created_at),
  expiresAt: r.expires_at === null ? null : Number(r.expires_at),
  status: r.status as PendingCall['status'],
  answer: r.answer === null ? null : fromJson(r.answer, null),
  resolvedAt: r.resolved_at === null ? null : Number(r.resolved_at),
})

export async function insertPendingCall(db: Db, c: Omit<PendingCall, 'status' | 'answer' | 'resolvedAt'>): Promise<void> {
  await db
    .insertInto('pending_calls')
    .values({
      session_id: c.sessionId,
      call_id: c.callId,
      turn_id: c.turnId,
      org_id: c.orgId,
      kind: c.kind,
      name: c.name,
      arguments: toJson(c.args ?? null),
      created_at: c.createdAt,
      expires_at: c.expiresAt,
      status: 'pending',
      answer: null,
      resolved_at: null,
    })
    .execute()
}

export async function getPendingCall(db: Db, sessionId: string, callId: string): Promise<PendingCall | null> {
  const r = await db.selectFrom('pending_calls').selectAll().where('session_id', '=', sessionId).where('call_id', '=', callId).executeTakeFirst()
  return r ? toPendingCall(r) : null
}

/** Records the answer; false when the call was no longer pending (answered twice, or cancelled). */
export async function resolvePendingCall(db: Db, sessionId: string, callId: string, answer: unknown, now: number): Promise<boolean> {
  const r = await db
    .updateTable('pending_calls')
    .set({ status: 'resolved', answer: toJson(answer ?? null), resolved_at: now })
    .where('session_id', '=', sessionId)
    .where('call_id', '=', callId)
    .where('status', '=', 'pending')
    .executeTakeFirst()
  return Number(r.numUpdatedRows) > 0
}

export async function callsOfTurn(db: Db, turnId: string): Promise<PendingCall[]> {
  return (await turnCalls(db, turnId)).map(toPendingCall)
}
const turnCalls = prepared((db, turnId: string) => db.selectFrom('pending_calls').selectAll().where('turn_id', '=', turnId).orderBy('created_at'))

/**
 * Cancels the turn's calls still pending and returns them (their events are the caller's to
 * record). Read and written inside the caller's transaction, which holds the seq lock that every
 * answer's transaction takes too: no answer lands between the read and the write.
 */
export async function cancelPendingCalls(db: Db, turnId: string, now: number): Promise<PendingCall[]> {
  const pending = (await turnCalls(db, turnId)).filter((r) => r.status === 'pending')
  if (pending.length === 0) return []
  await db.updateTable('pending_calls').set({ status: 'cancelled', resolved_at: now }).where('turn_id', '=', turnId).where('status', '=', 'pending').execute()
  return pending.map((r) => toPendingCall({ ...r, status: 'cancelled', resolved_at: now }))
}

/** The open function calls of these sessions: their `required_actions`. */
export async function openFunctionCalls(db: Db, sessionIds: string[]): Promise<PendingCall[]> {
  if (sessionIds.length === 0) return []
  const rows = await db
    .selectFrom('pending_calls')
    .selectAll()
    .where('session_id', 'in', sessionIds)
    .where('kind', '=', 'function')
    .where('status', '=', 'pending')
    .orderBy('created_at')
    .orderBy('call_id')
    .execute()
  return rows.map(toPendingCall)
}

/** Approvals whose time ran out, of the sessions the node owns. */
export async function expiredApprovals(db: Db, now: number, ownerNode: string): Promise<PendingCall[]> {
  const rows = await db
    .selectFrom('pending_calls')
    .selectAll()
    .where('session_id', 'in', db.selectFrom('sessions').select('id').where('owner_node', '=', ownerNode))
    .where('status', '=', 'pending')
    .where('kind', '=', 'approval')
    .where('expires_at', '<=', now)
    .execute()
  return rows.map(toPendingCall)
}
