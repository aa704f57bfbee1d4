import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Deps } from '../deps.ts'
import { ApiError, errorResponses, notFound } from '../errors.ts'
import { SessionParams } from '../sessions/sessions.schema.ts'
import { getSessionRowEvenDeleted } from '../sessions/sessions.store.ts'
import { Usage, UsageQuery } from './usage.schema.ts'
import { sumUsage } from './usage.store.ts'

export const usageRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { store }) => {
  app.get(
    '/sessions/:session_id/usage',
    {
      config: { scope: 'usage:read', onOwnersNode: false },
      schema: { operationId: 'getSessionUsage', tags: ['usage'], summary: 'Sandbox time used; a deleted session stays readable', params: SessionParams, querystring: UsageQuery, response: { 200: Usage, ...errorResponses(400, 404) } },
    },
    async (req) => {
      const id = req.params.session_id
      const session = await getSessionRowEvenDeleted(store.db, req.auth.orgId, id)
      if (!session) throw notFound('session', id)
      if (req.query.root !== undefined && req.query.root !== id) {
        throw new ApiError('invalid_request', `Query parameter "root" must equal the path's session id "${id}".`)
      }
      const asOf = Date.now()
      // Sessions have no sub-sessions yet, so the tree under a session is the session itself.
      const t = await sumUsage(store.db, [id], asOf)
      const seconds = (ms: number) => Math.floor(ms / 1000)
      return {
        object: 'session.usage' as const,
        session_id: id,
        scope: req.query.root !== undefined ? ('tree' as const) : ('session' as const),
        as_of: asOf,
        sandbox_seconds: seconds(t.sandboxMs),
        chargeable_seconds: Math.min(seconds(t.chargeableMs), seconds(t.sandboxMs)),
        needs_review_intervals: t.needsReview,
        sessions: 1,
        intervals: t.intervals,
      }
    },
  )
}
