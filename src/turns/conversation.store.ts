import type { ModelMessage } from 'ai'
import { sql } from 'kysely'
import type { Db } from '../db/database.ts'
import { prepared, preparedWrite } from '../db/prepared.ts'
import { fromJson, toJson } from '../shared/json.ts'

export type ConversationEntry = { ordinal: number; turnId: string; message: ModelMessage; tokens: number }

/** A rough token count (about four characters a token), enough to decide when to compact. */
export const estimateTokens = (m: unknown): number => tokensOfJson(JSON.stringify(m))
/** The same count of a message already stringified (it is stored as that text). */
const tokensOfJson = (json: string): number => Math.ceil(json.length / 4)

/** Appends messages after the session's last one, in order. */
export async function appendConversation(db: Db, sessionId: string, turnId: string, messages: ModelMessage[], now: number): Promise<void> {
  if (messages.length === 0) return
  const row = (m: ModelMessage, ordinal: number) => {
    const message = toJson(m)
    return { session_id: sessionId, ordinal, turn_id: turnId, role: m.role, message, tokens: tokensOfJson(message), compacted: 0, created_at: now }
  }
  if (messages.length === 1) {
    // One statement, as every step appends one message twice: the next ordinal is read where it
    // is written. (Several rows cannot do this: each row's subquery would see a different table
    // on SQLite and the same on PostgreSQL.)
    const m = messages[0]!
    const message = toJson(m)
    await appendOne(db, sessionId, turnId, m.role, message, tokensOfJson(message), now)
    return
  }
  const last = await db.selectFrom('conversation').select('ordinal').where('session_id', '=', sessionId).orderBy('ordinal', 'desc').limit(1).executeTakeFirst()
  let ordinal = last?.ordinal ?? 0
  await db
    .insertInto('conversation')
    .values(messages.map((m) => row(m, ++ordinal)))
    .execute()
}

const appendOne = preparedWrite((db, sessionId: string, turnId: string, role: string, message: string, tokens: number, now: number) =>
  db.insertInto('conversation').values({
    session_id: sessionId,
    ordinal: sql<number>`(select coalesce(max(ordinal), 0) + 1 from conversation where session_id = ${sessionId})`,
    turn_id: turnId,
    role,
    message,
    tokens,
    compacted: 0,
    created_at: now,
  }),
)

const conversationAfter = prepared((db, sessionId: string, after: number) =>
  db.selectFrom('conversation').select(['ordinal', 'turn_id', 'message', 'tokens']).where('session_id', '=', sessionId).where('ordinal', '>', after).where('compacted', '=', 0).orderBy('ordinal'),
)

/** What the model sees: every message not compacted away, in order (only those after `after` when given). */
export async function loadConversation(db: Db, sessionId: string, after = 0): Promise<ConversationEntry[]> {
  const rows = await conversationAfter(db, sessionId, after)
  return rows.map((r) => ({ ordinal: r.ordinal, turnId: r.turn_id, message: fromJson<ModelMessage>(r.message, { role: 'user', content: '' }), tokens: r.tokens }))
}

/** A turn's tool results in order, compacted or not, each with when it was stored. */
export async function toolResultsOfTurn(db: Db, sessionId: string, turnId: string): Promise<Array<{ message: ModelMessage; createdAt: number }>> {
  const rows = await db
    .selectFrom('conversation')
    .select(['message', 'created_at'])
    .where('session_id', '=', sessionId)
    .where('turn_id', '=', turnId)
    .where('role', '=', 'tool')
    .orderBy('ordinal')
    .execute()
  return rows.map((r) => ({ message: fromJson<ModelMessage>(r.message, { role: 'user', content: '' }), createdAt: Number(r.created_at) }))
}

/**
 * Replaces the messages up to `upTo` (inclusive) by `summary`. The summary takes the slot of the
 * last replaced message, so the order holds without renumbering; the others are marked compacted.
 * Nothing is lost for people: the event log keeps every message and tool result.
 */
export async function compactConversation(db: Db, sessionId: string, upTo: number, summary: ModelMessage, now: number): Promise<void> {
  await db.updateTable('conversation').set({ compacted: 1 }).where('session_id', '=', sessionId).where('ordinal', '<', upTo).where('compacted', '=', 0).execute()
  await db
    .updateTable('conversation')
    .set({ message: toJson(summary), role: summary.role, tokens: estimateTokens(summary), created_at: now })
    .where('session_id', '=', sessionId)
    .where('ordinal', '=', upTo)
    .execute()
}
