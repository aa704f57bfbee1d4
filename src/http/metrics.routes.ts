import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponse } from '../errors.ts'
import { METRICS_PATH, type Metrics } from '../shared/metrics.ts'

const MetricsResponse = {
  description: "This node's metrics in the Prometheus text format (version 0.0.4): requests, turns, model steps, tool calls, sandboxes, streams, webhook deliveries, event-log lag and the process's own.",
  content: { 'text/plain': { schema: { type: 'string' } } },
}

/** GET /metrics on the main listener, needing no token (a scraper holds none): only with WARREN_METRICS_PORT=main; by default it is served on a loopback listener of its own. */
export const metricsRoutes: FastifyPluginAsyncTypebox<{ metrics: Metrics }> = async (app, { metrics }) => {
  app.get(
    METRICS_PATH,
    {
      config: { public: true },
      schema: {
        operationId: 'getMetrics',
        tags: ['meta'],
        summary: "This node's Prometheus metrics; needs no token",
        security: [],
        response: { 200: MetricsResponse, 400: errorResponse(400), 500: errorResponse(500) },
      },
    },
    async (_req, reply) => reply.type(metrics.contentType).send(await metrics.text()),
  )
}
