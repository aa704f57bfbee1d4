import type { Db } from '../db/database.ts'
import type { Deps } from '../deps.ts'
import { ApiError } from '../errors.ts'
import { withEvents, type Recorder } from '../events/record-event.ts'
import { requireSession } from '../sessions/require-session.ts'
import { moveSession } from '../sessions/session-status.ts'
import { getPendingCall, openFunctionCalls, resolvePendingCall, type PendingCall, type PendingKind } from './pending-calls.store.ts'
import type { AnswerApprovalBody, AnswerQuestionBody, AnswerRequiredActionBody, Approval, Question } from './turns.schema.ts'

type Ctx = Pick<Deps, 'store' | 'bus' | 'node'>
type Target = { orgId: string; sessionId: string; callId: string }

const WHAT: Record<PendingKind, string> = { function: 'required action', approval: 'approval request', question: 'question' }

/**
 * Answers an open call of one kind: in one transaction the call is found (404 when the session has
 * none by that id, 409 when it is no longer open), `settle` resolves it and records what the
 * answer means; after the commit the session's runner is woken to carry the turn on.
 */
async function answerCall<T>(deps: Ctx, at: Target, kind: PendingKind, settle: (trx: Db, record: Recorder, call: PendingCall, now: number) => Promise<T>): Promise<T> {
  const out = await withEvents(deps.store, deps.bus, async (trx, record) => {
    await requireSession(trx, at.orgId, at.sessionId)
    const call = await getPendingCall(trx, at.sessionId, at.callId)
    if (!call || call.kind !== kind) throw new ApiError('not_found', `Session "${at.sessionId}" has no ${WHAT[kind]} with id "${at.callId}".`)
    if (call.status === 'resolved') throw new ApiError('conflict', `The ${WHAT[kind]} "${at.callId}" has already been answered.`)
    if (call.status !== 'pending') throw new ApiError('conflict', `The ${WHAT[kind]} "${at.callId}" is closed: its turn ended without it.`)
    return settle(trx, record, call, Date.now())
  })
  deps.node.kick(at.sessionId)
  return out
}

/** Stores the answer unless another got there first since the call was read (a conflict). */
async function resolve(trx: Db, call: PendingCall, answer: unknown, now: number): Promise<void> {
  if (!(await resolvePendingCall(trx, call.sessionId, call.callId, answer, now))) {
    throw new ApiError('conflict', `The ${WHAT[call.kind]} "${call.callId}" has already been answered.`)
  }
}

const scope = (c: PendingCall) => ({ orgId: c.orgId, sessionId: c.sessionId, turnId: c.turnId })

/** The caller's result of its own function; the session is working again once none is left open. */
export async function answerRequiredAction(deps: Ctx, at: Target, body: AnswerRequiredActionBody): Promise<void> {
  const hasOutput = Object.hasOwn(body, 'output')
  if (hasOutput === (body.error !== undefined)) throw new ApiError('invalid_request', 'Send exactly one of "output" (the result, any JSON value) or "error" (a message).')
  await answerCall(deps, at, 'function', async (trx, record, call, now) => {
    await resolve(trx, call, hasOutput ? { output: body.output ?? null } : { error: body.error }, now)
    await record({ ...scope(call), type: 'tool.resolved', payload: { toolCallId: call.callId, name: call.name, success: hasOutput } })
    if ((await openFunctionCalls(trx, [call.sessionId])).length === 0) await moveSession(trx, record, { id: call.sessionId, orgId: call.orgId }, 'working', { turn_id: call.turnId })
  })
}

/** A person's grant or refusal of a tool call the agent asked permission for. */
export async function answerApproval(deps: Ctx, at: Target, body: AnswerApprovalBody): Promise<Approval> {
  const { approved } = body
  const reason = body.reason ?? null
  return answerCall(deps, at, 'approval', async (trx, record, call, now) => {
    await resolve(trx, call, { approved, reason, ...(approved ? {} : { code: 'denied_by_user' }) }, now)
    const refusal = approved ? {} : { name: call.name, code: 'denied_by_user' as const, reason: reason ?? 'The person refused this call.' }
    await record({ ...scope(call), type: 'approval.resolved', payload: { toolCallId: call.callId, approved, ...refusal } })
    return { object: 'approval' as const, tool_call_id: call.callId, session_id: call.sessionId, turn_id: call.turnId, name: call.name, args: call.args, approved, reason, created_at: call.createdAt, resolved_at: now }
  })
}

/** A person's answer to the agent's question; one of its options when it allows nothing else. */
export async function answerQuestion(deps: Ctx, at: Target, body: AnswerQuestionBody): Promise<Question> {
  const { answer } = body
  return answerCall(deps, at, 'question', async (trx, record, call, now) => {
    const asked = (call.args ?? {}) as { question?: unknown; options?: unknown; allow_freeform?: unknown }
    const options = Array.isArray(asked.options) ? asked.options.filter((o): o is string => typeof o === 'string') : []
    if (asked.allow_freeform === false && options.length > 0 && !options.includes(answer)) {
      throw new ApiError('invalid_request', `This question takes one of its options: ${options.map((o) => JSON.stringify(o)).join(', ')}.`)
    }
    await resolve(trx, call, { answer }, now)
    await record({ ...scope(call), type: 'question.answered', payload: { toolCallId: call.callId, answer } })
    return { object: 'question' as const, tool_call_id: call.callId, session_id: call.sessionId, turn_id: call.turnId, question: String(asked.question ?? ''), answer, created_at: call.createdAt, resolved_at: now }
  })
}
