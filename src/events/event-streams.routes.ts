import type { FastifyReply, FastifyRequest } from 'fastify'
import type { SwaggerTransform } from '@fastify/swagger'
import { requireSession } from '../sessions/require-session.ts'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import type { Deps } from '../deps.ts'
import { nameRoots } from '../http/openapi.ts'
import { ApiError, errorResponses } from '../errors.ts'
import { SessionParams } from '../sessions/sessions.schema.ts'
import { STREAM_TYPES, openEventStream, type OpenStream } from './event-stream.ts'
import { eventTail } from './event-tail.ts'
import type { StreamScope } from './events.store.ts'
import { streamSlots } from './stream-slots.ts'
import { getTokenById } from '../tokens/tokens.store.ts'
import { countStream } from '../http/request-metrics.ts'

const StreamQuery = Type.Object(
  {
    last_event_id: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: Number.MAX_SAFE_INTEGER,
        description: 'Resume cursor, as the Last-Event-ID header (which wins when both are sent): 0 replays everything persisted, n everything after seq n. Without either, live frames only.',
      }),
    ),
  },
  { additionalProperties: false },
)
/** Sent by a reconnecting EventSource; text, as headers are, holding the seq of the last event received. */
const StreamHeaders = Type.Object({
  'Last-Event-ID': Type.Optional(Type.String({ description: 'Resume after this seq (a non-negative integer); wins over `last_event_id`.' })),
})

const description =
  'Server-sent events. Each frame has `event:` (the published name) and one `data:` line, the JSON described here (one branch per event: `type` is the `event:` name, `payload` its payload); `id:` (= seq) only for persisted events. `retry: 2000` on open, `: ping` comments, `service.replay_truncated` when more than the replay ceiling waited.'
const EventStreamResponse = { description, content: { 'text/event-stream': { schema: { type: 'string' } } } }

/**
 * The route writes its frames itself (sse-frames.ts), yet Fastify compiles every response schema
 * into a serializer when it starts, and the frame union takes a noticeable part of a second to
 * compile: the route declares a string and the description alone gets the union, Event (a
 * component of its own: the plugin names no shape inside a response's `content`).
 */
const describeFrames: SwaggerTransform = ({ schema, url }) => ({
  url,
  schema: nameRoots({ ...schema, response: { ...(schema.response as object), 200: { description, content: { 'text/event-stream': { schema: { $ref: '#/components/schemas/Event' } } } } } }) as never,
})

/**
 * The resume cursor: the Last-Event-ID header (what a reconnecting EventSource sends) or the query.
 * Both are read as the text sent, digits only: the query's validator coerces loosely ("1e3", "0x10").
 */
function cursorOf(req: FastifyRequest): number | null {
  const header = req.headers['last-event-id']
  if (typeof header === 'string' && header.trim() !== '') return parseCursor(header.trim())
  const q = req.url.indexOf('?')
  const query = q < 0 ? null : new URLSearchParams(req.url.slice(q + 1)).get('last_event_id')
  return query === null ? null : parseCursor(query)
}

function parseCursor(raw: string): number {
  const n = Number(raw)
  if (!/^[0-9]+$/.test(raw) || !Number.isSafeInteger(n)) throw new ApiError('invalid_request', `Last-Event-ID "${raw}" is not a seq: send the non-negative integer of the last event received, or 0 for everything.`)
  return n
}

export const eventStreamRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { store, bus, config, metrics }) => {
  const slots = await streamSlots(store)
  const tail = eventTail(store, bus, STREAM_TYPES)
  const open = new Set<OpenStream>()
  // Open streams never end by themselves: the service ends them when it stops.
  app.addHook('preClose', async () => {
    for (const s of open) s.end()
    tail.close()
    await slots.close()
  })

  const serve = async (req: FastifyRequest, reply: FastifyReply, scope: StreamScope) => {
    const cursor = cursorOf(req)
    const release = await slots.acquire(req.auth.tokenId, req.auth.orgId)
    reply.hijack()
    countStream(metrics, reply)
    const tokenId = req.auth.tokenId
    const stillAllowed = async () => {
      const t = await getTokenById(store.db, tokenId)
      return t !== null && t.revokedAt === null && t.expiresAt > Date.now()
    }
    const stream = openEventStream({ store, bus, tail, res: reply.raw, headers: reply.getHeaders(), scope, cursor, replayLimit: config.replayLimit, pingMs: config.ssePingMs, stillAllowed })
    open.add(stream)
    metrics.streamsOpen.inc()
    void stream.closed.then(() => {
      open.delete(stream)
      metrics.streamsOpen.dec()
      release()
    })
  }

  app.get(
    '/sessions/:session_id/events',
    {
      config: { scope: 'sessions:read', onOwnersNode: false, swaggerTransform: describeFrames },
      schema: {
        operationId: 'streamSessionEvents',
        tags: ['events'],
        summary: "One session's events as server-sent events, resumable by seq",
        params: SessionParams,
        querystring: StreamQuery,
        headers: StreamHeaders,
        response: { 200: EventStreamResponse, ...errorResponses(400, 404, 429) },
      },
    },
    async (req, reply) => {
      const session = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      await serve(req, reply, { orgId: req.auth.orgId, sessionId: session.id })
    },
  )

  app.get(
    '/events',
    {
      config: { scope: 'sessions:read', swaggerTransform: describeFrames },
      schema: {
        operationId: 'streamEvents',
        tags: ['events'],
        summary: "Every session's events of the organization as server-sent events, resumable by seq",
        querystring: StreamQuery,
        headers: StreamHeaders,
        response: { 200: EventStreamResponse, ...errorResponses(400, 429) },
      },
    },
    async (req, reply) => serve(req, reply, { orgId: req.auth.orgId }),
  )
}
