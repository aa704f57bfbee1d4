import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyReply } from 'fastify'
import type { Metrics } from '../shared/metrics.ts'

/**
 * Counts a request the preview gateway serves (it never reaches the API's router, so no route hook
 * sees it) under the one route name "preview": a preview's own paths are the site's, unbounded.
 */
export function countPreviewRequest(metrics: Metrics, req: IncomingMessage, res: ServerResponse): void {
  const start = performance.now()
  res.once('close', () => metrics.request('preview', req.method ?? 'GET', res.statusCode, performance.now() - start))
}

/**
 * Counts a hijacked response (an event stream) that the client ends: Fastify counts a response on
 * its 'finish', which a response cut by its client never emits. One the service ends finishes, and
 * the route hook counts it; so the route is counted once either way, for the stream's whole life.
 */
export function countStream(metrics: Metrics, reply: FastifyReply): void {
  const route = reply.request.routeOptions.url ?? 'unmatched'
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) metrics.request(route, reply.request.method, reply.raw.statusCode, reply.elapsedTime)
  })
}
