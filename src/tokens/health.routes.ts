import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Deps } from '../deps.ts'
import { errorResponses } from '../errors.ts'
import { Health } from './tokens.schema.ts'

export const healthRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { node, host }) => {
  /** The node's image support, as the start-up report found it (probed on the first ask when nothing asked before). */
  const images = () => {
    const i = host().images
    return i && { overlay: i.overlay, uid_ranges: i.uidRanges, root_ranges: i.rootRanges }
  }
  app.get(
    '/health',
    { config: { anyToken: true }, schema: { operationId: 'getHealth', tags: ['health'], summary: 'Reports the scopes of the calling token and the node that answered', response: { 200: Health, ...errorResponses() } } },
    async (req) => ({ object: 'health' as const, status: 'ok' as const, org_id: req.auth.orgId, token_id: req.auth.tokenId, scopes: req.auth.scopes, node: { id: node.id, peers: node.peers().map(({ id, live, started_at, heartbeat_at }) => ({ id, live, started_at, heartbeat_at })), images: images() } }),
  )
}
