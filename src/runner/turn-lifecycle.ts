import type { Deps } from '../deps.ts'
import { turnWrite } from './turn-write.ts'
import { appendConversation } from '../turns/conversation.store.ts'
import { undeliveredSteers } from '../turns/steers.store.ts'
import { closeOpenCalls } from './close-open-calls.ts'
import type { TurnError } from '../turns/turns.schema.ts'
import { markTurnStarted, setRunningCall, settleTurnRow, turnEventScope, workingTurns, type TurnRow } from '../turns/turns.store.ts'
import { moveSession } from '../sessions/session-status.ts'

type Ctx = Pick<Deps, 'store' | 'bus'>

/**
 * The agent begins a turn: `started_at` is set, the input enters the conversation, and the
 * session is working. All in one transaction with `message.dequeued` (when it waited),
 * `turn.started`, `user.message` and `session.working`.
 */
export async function beginTurn(ctx: Ctx, turn: TurnRow): Promise<void> {
  const now = Date.now()
  await turnWrite(ctx, async (trx, record) => {
    if (!(await markTurnStarted(trx, turn.id, now))) return
    await appendConversation(trx, turn.session_id, turn.id, [{ role: 'user', content: turn.text }], now)
    const base = turnEventScope(turn)
    if (turn.queued_position !== null) await record({ ...base, type: 'message.dequeued', payload: { text: turn.text, position: turn.queued_position } })
    await record({ ...base, type: 'turn.started', payload: { turnId: turn.id } })
    await record({ ...base, type: 'user.message', payload: { text: turn.text } })
    await moveSession(trx, record, { id: turn.session_id, orgId: turn.org_id }, 'working', { turn_id: turn.id }, { always: true })
  })
}

export type Settlement = { status: 'completed' } | { status: 'cancelled' } | { status: 'failed'; error: TurnError }

/**
 * Settles a turn once: its row, `turn.ended`, the webhook's `turn.completed` or `turn.failed`,
 * anything it still waited on closed (closeOpenCalls), and the session's status when no other turn follows.
 * Returns false when the turn had already settled, or when text was steered into a completing turn.
 */
export async function settleTurn(ctx: Ctx, turn: Pick<TurnRow, 'id' | 'session_id' | 'org_id'>, s: Settlement): Promise<boolean> {
  const now = Date.now()
  return turnWrite(ctx, async (trx, record) => {
    // Text steered in since the driver last looked keeps a completing turn open for one more step.
    if (s.status === 'completed' && (await undeliveredSteers(trx, turn.id)).length > 0) return false
    if (!(await settleTurnRow(trx, turn.id, s.status, s.status === 'failed' ? s.error : null, now))) return false
    await setRunningCall(trx, turn.id, null)
    await closeOpenCalls(trx, record, turn, s.status, now)
    const base = turnEventScope(turn)
    if (s.status === 'failed') await record({ ...base, type: 'agent.error', payload: { message: s.error.message, code: s.error.code } })
    await record({ ...base, type: 'turn.ended', payload: { turnId: turn.id } })
    const data = { session_id: turn.session_id, turn_id: turn.id, status: s.status }
    await record({ ...base, type: s.status === 'completed' ? 'turn.completed' : 'turn.failed', payload: data })
    const next = await workingTurns(trx, turn.session_id)
    // Another turn waits: it starts at once and the session stays working.
    if (next.length === 0) await moveSession(trx, record, { id: turn.session_id, orgId: turn.org_id }, s.status === 'failed' ? 'failed' : 'idle', { turn_id: turn.id })
    return true
  })
}
