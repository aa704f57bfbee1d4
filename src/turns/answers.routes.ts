import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { requireSession } from '../sessions/require-session.ts'
import type { Deps } from '../deps.ts'
import { ApiError, errorResponses } from '../errors.ts'
import { withEvents } from '../events/record-event.ts'
import { moveSession } from '../sessions/session-status.ts'
import { Session } from '../sessions/sessions.schema.ts'
import { getSessionRow, toSessions, type SessionRow } from '../sessions/sessions.store.ts'
import { defaultToolEntries } from '../tools/default-tools.ts'
import type { Db } from '../db/database.ts'
import { getPendingCall, openFunctionCalls, resolvePendingCall, type PendingCall, type PendingKind } from './pending-calls.store.ts'
import { AnswerApprovalBody, AnswerQuestionBody, AnswerRequiredActionBody, Approval, Question, RequiredActionParams, ToolCallParams } from './turns.schema.ts'

const WHAT: Record<PendingKind, string> = { function: 'required action', approval: 'approval request', question: 'question' }

/** The open call a person or the caller answers; 404 when the session has none by that id, 409 when it is no longer open. */
async function openCall(db: Db, orgId: string, sessionId: string, callId: string, kind: PendingKind): Promise<{ session: SessionRow; call: PendingCall }> {
  const session = await requireSession(db, orgId, sessionId)
  const call = await getPendingCall(db, sessionId, callId)
  if (!call || call.kind !== kind) throw new ApiError('not_found', `Session "${sessionId}" has no ${WHAT[kind]} with id "${callId}".`)
  if (call.status === 'resolved') throw new ApiError('conflict', `The ${WHAT[kind]} "${callId}" has already been answered.`)
  if (call.status !== 'pending') throw new ApiError('conflict', `The ${WHAT[kind]} "${callId}" is closed: its turn ended without it.`)
  return { session, call }
}

export const answerRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, deps) => {
  const { store, bus, runner, config } = deps
  const defaults = defaultToolEntries(config)
  const base = (c: PendingCall) => ({ orgId: c.orgId, sessionId: c.sessionId, turnId: c.turnId })

  app.post(
    '/sessions/:session_id/required_actions/:call_id',
    {
      config: { scope: 'sessions:write', idempotent: true },
      schema: {
        operationId: 'answerRequiredAction',
        tags: ['turns'],
        summary: "Answer the caller's function call: its output (any JSON) or an error; the turn goes on",
        params: RequiredActionParams,
        body: AnswerRequiredActionBody,
        response: { 200: Session, ...errorResponses(400, 404, 409) },
      },
    },
    async (req) => {
      const body = req.body
      const hasOutput = Object.hasOwn(body, 'output')
      if (hasOutput === (body.error !== undefined)) throw new ApiError('invalid_request', 'Send exactly one of "output" (the result, any JSON value) or "error" (a message).')
      const { session } = await withEvents(store, bus, async (trx, record) => {
        const { session, call } = await openCall(trx, req.auth.orgId, req.params.session_id, req.params.call_id, 'function')
        const now = Date.now()
        if (!(await resolvePendingCall(trx, session.id, call.callId, hasOutput ? { output: body.output ?? null } : { error: body.error }, now))) {
          throw new ApiError('conflict', `The required action "${call.callId}" has already been answered.`)
        }
        await record({ ...base(call), type: 'tool.resolved', payload: { toolCallId: call.callId, name: call.name, success: hasOutput } })
        if ((await openFunctionCalls(trx, [session.id])).length === 0) await moveSession(trx, record, { id: session.id, orgId: session.org_id }, 'working', { turn_id: call.turnId })
        return { session }
      })
      runner.kick(session.id)
      const [shaped] = await toSessions(store.db, [(await getSessionRow(store.db, req.auth.orgId, session.id))!], defaults)
      return shaped!
    },
  )

  app.post(
    '/sessions/:session_id/approvals/:tool_call_id',
    {
      config: { scope: 'sessions:write', idempotent: true },
      schema: {
        operationId: 'answerApproval',
        tags: ['turns'],
        summary: 'Grant or refuse a tool call the agent asked permission for',
        params: ToolCallParams,
        body: AnswerApprovalBody,
        response: { 200: Approval, ...errorResponses(400, 404, 409) },
      },
    },
    async (req) => {
      const { approved, reason } = req.body
      const answer = await withEvents(store, bus, async (trx, record) => {
        const { session, call } = await openCall(trx, req.auth.orgId, req.params.session_id, req.params.tool_call_id, 'approval')
        const now = Date.now()
        const given = reason ?? null
        if (!(await resolvePendingCall(trx, session.id, call.callId, { approved, reason: given, ...(approved ? {} : { code: 'denied_by_user' }) }, now))) {
          throw new ApiError('conflict', `The approval request "${call.callId}" has already been answered.`)
        }
        const refusal = approved ? {} : { name: call.name, code: 'denied_by_user', reason: given ?? 'The person refused this call.' }
        await record({ ...base(call), type: 'approval.resolved', payload: { toolCallId: call.callId, approved, ...refusal } })
        return { object: 'approval' as const, tool_call_id: call.callId, session_id: session.id, turn_id: call.turnId, name: call.name, args: call.args, approved, reason: given, created_at: call.createdAt, resolved_at: now }
      })
      runner.kick(answer.session_id)
      return answer
    },
  )

  app.post(
    '/sessions/:session_id/questions/:tool_call_id',
    {
      config: { scope: 'sessions:write', idempotent: true },
      schema: {
        operationId: 'answerQuestion',
        tags: ['turns'],
        summary: 'Answer a question the agent asked; the agent receives the answer',
        params: ToolCallParams,
        body: AnswerQuestionBody,
        response: { 200: Question, ...errorResponses(400, 404, 409) },
      },
    },
    async (req) => {
      const { answer } = req.body
      const out = await withEvents(store, bus, async (trx, record) => {
        const { session, call } = await openCall(trx, req.auth.orgId, req.params.session_id, req.params.tool_call_id, 'question')
        const asked = (call.args ?? {}) as { options?: unknown; allow_freeform?: unknown }
        const options = Array.isArray(asked.options) ? asked.options.filter((o): o is string => typeof o === 'string') : []
        if (asked.allow_freeform === false && options.length > 0 && !options.includes(answer)) {
          throw new ApiError('invalid_request', `This question takes one of its options: ${options.map((o) => JSON.stringify(o)).join(', ')}.`)
        }
        const now = Date.now()
        if (!(await resolvePendingCall(trx, session.id, call.callId, { answer }, now))) throw new ApiError('conflict', `The question "${call.callId}" has already been answered.`)
        await record({ ...base(call), type: 'question.answered', payload: { toolCallId: call.callId, answer } })
        const question = String((call.args as { question?: unknown } | null)?.question ?? '')
        return { object: 'question' as const, tool_call_id: call.callId, session_id: session.id, turn_id: call.turnId, question, answer, created_at: call.createdAt, resolved_at: now }
      })
      runner.kick(out.session_id)
      return out
    },
  )
}
