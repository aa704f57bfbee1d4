import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { requireSession } from '../sessions/require-session.ts'
import type { Deps } from '../deps.ts'
import { errorResponses, notFound } from '../errors.ts'
import { MIB } from '../http/limits.ts'
import { ListEnvelope, listPage } from '../http/pagination.ts'
import { SessionParams } from '../sessions/sessions.schema.ts'
import { cancelTurn } from './cancel-turn.ts'
import { sendMessage } from './send-message.ts'
import { ListTurnsQuery, SendMessageBody, Turn, TurnParams } from './turns.schema.ts'
import { getTurnRow, sessionTurnsQuery, toTurn } from './turns.store.ts'

export const turnRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, deps) => {
  const { store, node } = deps

  app.post(
    '/sessions/:session_id/messages',
    {
      bodyLimit: 16 * MIB,
      // Files go into the workspace before the message is accepted: on the node that runs it.
      config: { scope: 'sessions:write', idempotent: true, onOwnersNode: (req) => ((req.body as SendMessageBody).files?.length ?? 0) > 0 },
      schema: {
        operationId: 'sendMessage',
        tags: ['turns'],
        summary: 'Send a message: a new turn, queued behind a busy one (at most 5 wait), or steered into the running turn',
        params: SessionParams,
        body: SendMessageBody,
        response: { 202: Turn, ...errorResponses(400, 404, 429) },
      },
    },
    async (req, reply) => {
      const turn = await sendMessage(deps, req.auth, req.params.session_id, req.body)
      node.kick(turn.session_id)
      return reply.code(202).send(toTurn(turn))
    },
  )

  app.get(
    '/sessions/:session_id/turns',
    {
      config: { scope: 'sessions:read', onOwnersNode: false },
      schema: { operationId: 'listTurns', summary: "List a session's turns", tags: ['turns'], params: SessionParams, querystring: ListTurnsQuery, response: { 200: ListEnvelope(Turn), ...errorResponses(400, 404) } },
    },
    async (req) => {
      const s = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      return listPage(sessionTurnsQuery(store.db, s.id), req.query, (rows) => rows.map(toTurn))
    },
  )

  app.get(
    '/sessions/:session_id/turns/:turn_id',
    { config: { scope: 'sessions:read', onOwnersNode: false }, schema: { operationId: 'getTurn', summary: 'Read one turn', tags: ['turns'], params: TurnParams, response: { 200: Turn, ...errorResponses(404) } } },
    async (req) => {
      const s = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      const turn = await getTurnRow(store.db, s.id, req.params.turn_id)
      if (!turn) throw notFound('turn', req.params.turn_id)
      return toTurn(turn)
    },
  )

  app.post(
    '/sessions/:session_id/turns/:turn_id/cancel',
    {
      config: { scope: 'sessions:write', onOwnersNode: false, idempotent: true },
      schema: {
        operationId: 'cancelTurn',
        tags: ['turns'],
        summary: 'Cancel a turn: a waiting one never starts; a running one stops and its tools are killed',
        params: TurnParams,
        response: { 200: Turn, ...errorResponses(404, 409) },
      },
    },
    async (req) => {
      const s = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      return toTurn(await cancelTurn(deps, s.id, req.params.turn_id))
    },
  )
}
