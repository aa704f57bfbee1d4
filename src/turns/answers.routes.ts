import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Deps } from '../deps.ts'
import { errorResponses } from '../errors.ts'
import { Session } from '../sessions/sessions.schema.ts'
import { getSessionRow, toSessions } from '../sessions/sessions.store.ts'
import { defaultToolEntries } from '../tools/default-tools.ts'
import { answerApproval, answerQuestion, answerRequiredAction } from './answer-pending-call.ts'
import { AnswerApprovalBody, AnswerQuestionBody, AnswerRequiredActionBody, Approval, Question, RequiredActionParams, ToolCallParams } from './turns.schema.ts'

export const answerRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, deps) => {
  const { store, config } = deps
  const defaults = defaultToolEntries(config)

  app.post(
    '/sessions/:session_id/required_actions/:call_id',
    {
      config: { scope: 'sessions:write', onOwnersNode: false, idempotent: true },
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
      const { session_id: sessionId, call_id: callId } = req.params
      await answerRequiredAction(deps, { orgId: req.auth.orgId, sessionId, callId }, req.body)
      const [shaped] = await toSessions(store.db, [(await getSessionRow(store.db, req.auth.orgId, sessionId))!], defaults)
      return shaped!
    },
  )

  app.post(
    '/sessions/:session_id/approvals/:tool_call_id',
    {
      config: { scope: 'sessions:write', onOwnersNode: false, idempotent: true },
      schema: {
        operationId: 'answerApproval',
        tags: ['turns'],
        summary: 'Grant or refuse a tool call the agent asked permission for',
        params: ToolCallParams,
        body: AnswerApprovalBody,
        response: { 200: Approval, ...errorResponses(400, 404, 409) },
      },
    },
    async (req) => answerApproval(deps, { orgId: req.auth.orgId, sessionId: req.params.session_id, callId: req.params.tool_call_id }, req.body),
  )

  app.post(
    '/sessions/:session_id/questions/:tool_call_id',
    {
      config: { scope: 'sessions:write', onOwnersNode: false, idempotent: true },
      schema: {
        operationId: 'answerQuestion',
        tags: ['turns'],
        summary: 'Answer a question the agent asked; the agent receives the answer',
        params: ToolCallParams,
        body: AnswerQuestionBody,
        response: { 200: Question, ...errorResponses(400, 404, 409) },
      },
    },
    async (req) => answerQuestion(deps, { orgId: req.auth.orgId, sessionId: req.params.session_id, callId: req.params.tool_call_id }, req.body),
  )
}
