import type { Db } from '../db/database.ts'
import type { Recorder } from '../events/record-event.ts'
import { sandboxToolCalls } from '../events/events.store.ts'
import { appendConversation, loadConversation } from '../turns/conversation.store.ts'
import { cancelPendingCalls, type PendingCall } from '../turns/pending-calls.store.ts'
import { turnEventScope, type TurnRow } from '../turns/turns.store.ts'
import { openToolCalls } from './open-calls.ts'

/** How a turn ended with calls still open; the words reach the model, a person and the caller. */
export type EndedBy = 'completed' | 'cancelled' | 'failed' | 'deleted'
const WHY: Record<EndedBy, string> = {
  completed: 'the turn ended',
  cancelled: 'the turn was cancelled',
  failed: 'the turn failed',
  deleted: 'the session was deleted',
}

/**
 * Closes what a turn that is ending still waited on, inside the transaction that settles it: every
 * pending approval, question and caller function gets its resolving event (a refusal with code
 * turn_ended, an answer or a result marked cancelled), and every call of the last step without a
 * result gets one, for the model (its next request would be refused otherwise) and, for a sandbox
 * tool, as a cancelled agent.tool_result. Left open, a console would offer buttons that can only
 * meet a 409 and show the call running for ever.
 */
export async function closeOpenCalls(trx: Db, record: Recorder, turn: Pick<TurnRow, 'id' | 'session_id' | 'org_id'>, endedBy: EndedBy, now: number): Promise<void> {
  const why = WHY[endedBy]
  const scope = turnEventScope(turn)
  const unanswered = openToolCalls(await loadConversation(trx, turn.session_id), turn.id)
  // In the model's order (rows made in one step share their created_at); any other call last.
  const position = (c: PendingCall) => {
    const i = unanswered.findIndex((u) => u.toolCallId === c.callId)
    return i < 0 ? unanswered.length : i
  }
  for (const call of (await cancelPendingCalls(trx, turn.id, now)).sort((a, b) => position(a) - position(b))) {
    const toolCallId = call.callId
    if (call.kind === 'approval') await record({ ...scope, type: 'approval.resolved', payload: { toolCallId, approved: false, name: call.name, code: 'turn_ended', reason: `Not answered: ${why}.` } })
    else if (call.kind === 'question') await record({ ...scope, type: 'question.answered', payload: { toolCallId, answer: '', cancelled: true } })
    else await record({ ...scope, type: 'tool.resolved', payload: { toolCallId, name: call.name, success: false, cancelled: true } })
  }
  if (unanswered.length === 0) return
  const said = endedBy === 'deleted' ? 'cancelled' : endedBy
  await appendConversation(
    trx,
    turn.session_id,
    turn.id,
    unanswered.map((c) => ({
      role: 'tool' as const,
      content: [{ type: 'tool-result' as const, toolCallId: c.toolCallId, toolName: c.toolName, output: { type: 'error-text' as const, value: `Not run: the turn ended (${said}) before this call ran.` } }],
    })),
    now,
  )
  const sandbox = await sandboxToolCalls(trx, turn.session_id, turn.id, unanswered.map((c) => c.toolCallId))
  for (const c of unanswered.filter((u) => sandbox.has(u.toolCallId))) {
    await record({ ...scope, type: 'agent.tool_result', payload: { toolCallId: c.toolCallId, toolName: c.toolName, isError: true, cancelled: true, summary: `not run: ${why}` } })
  }
}
