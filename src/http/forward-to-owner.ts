import type { FastifyReply, FastifyRequest } from 'fastify'
import { requireSession } from '../sessions/require-session.ts'
import type { Store } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { hopByHop } from '../shared/hop-by-hop.ts'
import { NODE_HEADER, type ServiceNode } from '../nodes/node.ts'
import type { PreviewOwners } from '../previews/preview-gateway.ts'

/** Headers of the owner's answer that the caller gets as they are. */
const ANSWER_HEADERS = ['content-type', 'retry-after', 'x-request-id']

/**
 * The preHandler of every route declaring `onOwnersNode` (app.ts adds it; a route never does): on
 * the node that owns the session the route runs as usual; on another node the request is passed on
 * to the owner over its node address and the owner's answer is the answer. The caller's token goes
 * along (the owner checks it again), its Idempotency-Key does not (this node keeps the answer under
 * it), and the owner's secret marks it as passed on, so that it is never passed on again. `when`:
 * true, or a function saying which requests need the workspace (a message with files).
 */
export function onOwnersNode(deps: { store: Store; node: ServiceNode }) {
  return (when: true | ((req: FastifyRequest) => boolean)) => async function toOwner(req: FastifyRequest, reply: FastifyReply): Promise<void> {
    if (when !== true && !when(req)) return
    const sessionId = (req.params as { session_id: string }).session_id
    // Another organization's session is a 404 here, as on its owner.
    await requireSession(deps.store.db, req.auth.orgId, sessionId)
    const where = await deps.node.passOnTarget(sessionId, req.headers)
    if (!where) return
    if ('unreachable' in where) {
      throw new ApiError('sandbox_unavailable', `This session's workspace runs on node ${where.nodeId}, which cannot be reached from here now; retry shortly.`)
    }
    const headers: Record<string, string> = {}
    const drop = hopByHop(req.headers)
    for (const [name, value] of Object.entries(req.headers)) {
      if (drop.has(name) || value === undefined || ['host', 'content-length', 'idempotency-key', NODE_HEADER].includes(name)) continue
      headers[name] = Array.isArray(value) ? value.join(', ') : value
    }
    headers[NODE_HEADER] = where.secret
    let answer: Response
    try {
      answer = await fetch(`${where.url}${req.url}`, {
        method: req.method,
        headers,
        ...(req.body !== undefined ? { body: JSON.stringify(req.body) } : {}),
        signal: AbortSignal.timeout(120_000),
      })
    } catch (err) {
      throw new ApiError('sandbox_unavailable', `This session's workspace runs on node ${where.nodeId}, which did not answer: retry shortly.`, { cause: err })
    }
    // As text (every route passed on answers JSON): the idempotency hook keeps only a string
    // answer under the caller's key; a Buffer it lets go, and a retry would act a second time.
    const body = await answer.text()
    reply.code(answer.status)
    for (const name of ANSWER_HEADERS) {
      const v = answer.headers.get(name)
      if (v !== null) reply.header(name, v)
    }
    await reply.send(body)
  }
}

/**
 * The same rule for a preview host's traffic, which the gateway serves before the router sees it
 * (raw bytes and upgrades, so no route hook): the owner's address to pipe it to, or null to serve
 * it here (this node owns it) or answer with the page (the owner cannot be reached).
 */
export function previewOwners(node: ServiceNode): PreviewOwners {
  return {
    header: NODE_HEADER,
    async route(sessionId, headers) {
      const where = await node.passOnTarget(sessionId, headers)
      if (!where || 'unreachable' in where) return null
      const peer = new URL(where.url)
      return { host: peer.hostname, port: Number(peer.port || 80), headers: { [NODE_HEADER]: where.secret } }
    },
  }
}
