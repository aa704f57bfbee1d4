import { lockSeq, type Db, type DialectName } from '../db/database.ts'
import { prepared } from '../db/prepared.ts'
import { fromJson, toJson } from '../shared/json.ts'
import type { EventName, EventPayloads } from './events.schema.ts'

export type EventInput<N extends EventName = EventName> = {
  orgId: string
  sessionId: string | null
  turnId?: string | null
  /** The internal type; events.schema.ts says whether and under which name it is published. */
  type: N
  payload: EventPayloads[N]
}

export type StoredEvent = {
  seq: number
  orgId: string
  sessionId: string | null
  turnId: string | null
  type: string
  createdAt: number
  payload: Record<string, unknown>
}

const insertEvent = prepared((db, orgId: string, sessionId: string | null, turnId: string | null, type: string, createdAt: number, payload: string) =>
  db.insertInto('events').values({ org_id: orgId, session_id: sessionId, turn_id: turnId, type, created_at: createdAt, payload }).returning('seq'),
)

/**
 * Appends one event and returns it with its deployment-wide seq. Call it inside the transaction
 * that makes the change it reports.
 */
export async function appendEvent<N extends EventName>(db: Db, dialect: DialectName, input: EventInput<N>): Promise<StoredEvent> {
  await lockSeq(db, dialect)
  const createdAt = Date.now()
  const [row] = await insertEvent(db, input.orgId, input.sessionId, input.turnId ?? null, input.type, createdAt, toJson(input.payload))
  return {
    seq: Number(row.seq),
    orgId: input.orgId,
    sessionId: input.sessionId,
    turnId: input.turnId ?? null,
    type: input.type,
    createdAt,
    payload: input.payload,
  }
}

/** Rows one insert statement of appendEvents carries: six parameters each, well under SQLite's 32,766 and PostgreSQL's 65,535. */
const ROWS_A_STATEMENT = 1000

/**
 * Appends these events, in order, as that many appendEvent calls would, in one insert statement
 * per ROWS_A_STATEMENT: thousands of events (a command's file changes) cost a few statements, not
 * one round trip each. Call it inside the transaction that makes the change they report.
 */
export async function appendEvents<N extends EventName>(db: Db, dialect: DialectName, inputs: EventInput<N>[]): Promise<StoredEvent[]> {
  await lockSeq(db, dialect)
  const createdAt = Date.now()
  const out: StoredEvent[] = []
  for (let i = 0; i < inputs.length; i += ROWS_A_STATEMENT) {
    const chunk = inputs.slice(i, i + ROWS_A_STATEMENT)
    const rows = await db
      .insertInto('events')
      .values(chunk.map((e) => ({ org_id: e.orgId, session_id: e.sessionId, turn_id: e.turnId ?? null, type: e.type, created_at: createdAt, payload: toJson(e.payload) })))
      .returning('seq')
      .execute()
    // A statement's rows take their seq in the order of its values (one after the other, under the
    // seq lock), but neither dialect promises to return them in that order.
    const seqs = rows.map((r) => Number(r.seq)).sort((a, b) => a - b)
    chunk.forEach((e, j) => out.push({ seq: seqs[j]!, orgId: e.orgId, sessionId: e.sessionId, turnId: e.turnId ?? null, type: e.type, createdAt, payload: e.payload }))
  }
  return out
}

type EventRow = {
  seq: number
  org_id: string
  session_id: string | null
  turn_id: string | null
  type: string
  created_at: number
  payload: string
}

export function toStoredEvent(row: EventRow): StoredEvent {
  return {
    seq: Number(row.seq),
    orgId: row.org_id,
    sessionId: row.session_id,
    turnId: row.turn_id,
    type: row.type,
    createdAt: Number(row.created_at),
    payload: fromJson(row.payload, {}),
  }
}

export type EventPage = { sessionId: string; types: string[]; turnId?: string; afterSeq?: number; limit: number; order: 'asc' | 'desc' }

/** One page of a session's events of the given types, one row past the page to decide has_more. */
export async function listSessionEvents(db: Db, q: EventPage): Promise<StoredEvent[]> {
  let query = db.selectFrom('events').selectAll().where('session_id', '=', q.sessionId).where('type', 'in', q.types)
  if (q.turnId !== undefined) query = query.where('turn_id', '=', q.turnId)
  if (q.afterSeq !== undefined) query = query.where('seq', q.order === 'asc' ? '>' : '<', q.afterSeq)
  const rows = await query.orderBy('seq', q.order).limit(q.limit + 1).execute()
  return rows.map(toStoredEvent)
}

export async function getSessionEvent(db: Db, sessionId: string, seq: number): Promise<StoredEvent | null> {
  const row = await db.selectFrom('events').selectAll().where('session_id', '=', sessionId).where('seq', '=', seq).executeTakeFirst()
  return row ? toStoredEvent(row) : null
}

/** Which of these tool calls of the turn were recorded as sandbox tool calls (agent.tool_call): those owe an agent.tool_result. */
export async function sandboxToolCalls(db: Db, sessionId: string, turnId: string, callIds: string[]): Promise<Set<string>> {
  if (callIds.length === 0) return new Set()
  const rows = await db.selectFrom('events').select('payload').where('session_id', '=', sessionId).where('turn_id', '=', turnId).where('type', '=', 'agent.tool_call').execute()
  const wanted = new Set(callIds)
  return new Set(rows.map((r) => String(fromJson<{ toolCallId?: unknown }>(r.payload, {}).toolCallId)).filter((id) => wanted.has(id)))
}

export type StreamScope = { orgId: string; sessionId?: string }

/**
 * Up to `limit` events after `afterSeq`, oldest first, of the given internal types, with their
 * payload left as stored text (a stream splices it into frames unparsed): the scope's, or of
 * every organization when `scope` is null (what the shared tail reads once for all live streams).
 * The org condition is there for a session stream too: ownership is checked on every event read.
 */
export async function readEventsAfter(db: Db, scope: StreamScope | null, types: string[], afterSeq: number, limit: number) {
  let q = db.selectFrom('events').select(['seq', 'org_id', 'session_id', 'type', 'created_at', 'payload'])
  if (scope !== null) q = q.where('org_id', '=', scope.orgId)
  if (scope?.sessionId !== undefined) q = q.where('session_id', '=', scope.sessionId)
  const rows = await q.where('seq', '>', afterSeq).where('type', 'in', types).orderBy('seq', 'asc').limit(limit).execute()
  return rows.map((r) => ({ ...r, seq: Number(r.seq), created_at: Number(r.created_at) }))
}

/** The highest seq written so far in the deployment (0 when none): where a live-only stream starts. */
export async function lastSeq(db: Db): Promise<number> {
  const row = await db.selectFrom('events').select((eb) => eb.fn.max('seq').as('seq')).executeTakeFirst()
  return Number(row?.seq ?? 0)
}

