import type { SwaggerOptions } from '@fastify/swagger'
import type { Config } from '../config.ts'
import { EventFrameData } from '../events/published.schema.ts'
import { WEBHOOK_EVENT_TYPES } from '../events/vocabulary.ts'
import { WebhookDelivery } from '../webhooks/webhooks.schema.ts'
import { bodyRequired } from './validation.ts'

type Json = Record<string, unknown>
type Doc = { paths?: Record<string, Record<string, Json>>; components?: { schemas?: Record<string, Json>; headers?: Record<string, Json> }; servers?: unknown[] }

const COMPONENTS = '#/components/schemas/'
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v)

/**
 * How @fastify/swagger builds GET /v1/openapi.json from the route table: the route schemas are the
 * description, and what is written here is only what no route can say about itself.
 *
 * A shape whose schema carries an `$id` (Session, Turn, ToolEntry …) is described once, under
 * components.schemas by that name, and referred to everywhere else: the plugin does that for a
 * shape nested in a route's schema, and `nameRoots` makes a whole body or response one.
 */
export function openApiOptions(config: Config): SwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Warren', version: 'v1', description: 'Runs coding agents remotely, on your own machines.' },
      components: {
        securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'A personal access token, svc_pat_…' } },
        // In no route's schema: what the service sends besides its answers (a route declares its
        // stream a string and refers to Event; see event-streams.routes.ts).
        // A copy: the document is rewritten in place once built (unwrap, mapDiscriminators), and the
        // schemas themselves must stay as they are for the next app built in this process.
        schemas: JSON.parse(JSON.stringify({ WebhookDelivery, Event: EventFrameData })),
      },
      security: [{ bearer: [] }],
      webhooks: Object.fromEntries(WEBHOOK_EVENT_TYPES.map((type) => [type, webhookDelivery(type)])) as never,
    },
    transform: ({ schema, url }) => ({ schema: nameRoots(schema as Json) as never, url }),
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`) },
    transformObject: (document) => {
      const doc = ('openapiObject' in document ? document.openapiObject : {}) as Doc
      // Read when the document is first built, after the listener has settled its port.
      doc.servers = [{ url: config.publicUrl, description: 'This service (WARREN_PUBLIC_URL)' }]
      unwrap(doc)
      // The plugin marks every body required, but one whose fields are all optional may be left out.
      for (const op of operations(doc)) {
        const body = op.requestBody as { required?: boolean; content?: Record<string, { schema?: Json }> } | undefined
        if (body) body.required = bodyRequired(deref(doc, body.content?.['application/json']?.schema))
      }
      mapDiscriminators(doc)
      describeHeaders(doc)
      return doc as never
    },
  }
}

/** One webhook delivery, as the 3.1 `webhooks` section describes a request the service makes. */
function webhookDelivery(type: string): Json {
  const header = (name: string, pattern: string, description: string) => ({ in: 'header', name, required: true, schema: { type: 'string', pattern }, description })
  return {
    post: {
      operationId: `deliver_${type.replace(/\./g, '_')}`,
      summary: `Delivery of ${type} to a subscription's url`,
      description: 'At least once, possibly out of order: handle idempotently. Verify x-service-signature over the exact timestamp digits and the raw body before trusting it.',
      tags: ['webhooks'],
      security: [],
      parameters: [
        header('x-service-timestamp', '^[0-9]+$', 'Unix ms, as decimal digits.'),
        header('x-service-signature', '^[0-9a-f]{64}$', 'Lowercase hex HMAC-SHA256, keyed with the subscription secret, over `{x-service-timestamp}.{raw body}`.'),
      ],
      requestBody: { required: true, content: { 'application/json': { schema: { $ref: `${COMPONENTS}WebhookDelivery` } } } },
      responses: {
        '200': { description: 'Any 2xx ends the delivery; anything else, or no answer within 10 seconds, is retried (six attempts in all).' },
      },
    },
  }
}

/** The named shape a `$ref` points at, or the schema itself. */
function deref(doc: Doc, schema: Json | undefined): Json | undefined {
  const ref = schema?.$ref
  return typeof ref === 'string' && ref.startsWith(COMPONENTS) ? doc.components?.schemas?.[ref.slice(COMPONENTS.length)] : schema
}

function* operations(doc: Doc): Generator<Json> {
  for (const item of Object.values(doc.paths ?? {})) for (const op of Object.values(item ?? {})) if (isObject(op)) yield op
}

/** The response headers the service sets itself (spec: Conventions, Rate limits), as it spells them. */
const HEADERS: Record<string, Json> = {
  'x-request-id': { description: 'Identifies the request; equals error.request_id on a refusal.', schema: { type: 'string' } },
  'Retry-After': { description: 'Seconds to wait: sent with rate_limit_exceeded and directory_unavailable, never with the other codes.', schema: { type: 'integer', minimum: 0 } },
  'x-ratelimit-limit': { description: 'Ceiling of the bucket.', schema: { type: 'integer' } },
  'x-ratelimit-remaining': { description: 'Whole requests available now, never rounded up.', schema: { type: 'integer' } },
  'x-ratelimit-reset': { description: 'Whole seconds until the bucket is full; 0 when full.', schema: { type: 'integer' } },
  'x-ratelimit-resource': { description: 'Which bucket the numbers describe.', schema: { type: 'string', enum: ['general', 'sessions'] } },
}

/**
 * Every answer carries x-request-id; a success of a call made with a token carries the bucket's
 * numbers; a 429 or 503 may carry Retry-After. The preview proxy's successes are the site's own.
 */
function describeHeaders(doc: Doc): void {
  doc.components = { ...doc.components, headers: HEADERS }
  const refer = (names: string[]) => Object.fromEntries(names.map((n) => [n, { $ref: `#/components/headers/${n}` }]))
  const limits = Object.keys(HEADERS).filter((n) => n.startsWith('x-ratelimit-'))
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const op of Object.values(item ?? {})) {
      if (!isObject(op) || !isObject(op.responses)) continue
      const withToken = !Array.isArray(op.security) || op.security.length > 0
      for (const [status, res] of Object.entries(op.responses)) {
        if (!isObject(res)) continue
        const success = status.startsWith('2')
        if (success && path.includes('/preview/proxy')) continue
        res.headers = refer(['x-request-id', ...(success && withToken ? limits : []), ...(status === '429' || status === '503' ? ['Retry-After'] : [])])
      }
    }
  }
}

/**
 * The plugin names a shape with an `$id` when it is nested in a route's schema, but leaves one that
 * is a whole body or response inline. Wrapped in a one-member allOf it is nested, and so named;
 * `unwrap` turns the wrapper back into the bare reference once the document is built. Routes with
 * a swaggerTransform of their own pass their schema through here themselves.
 */
export function nameRoots(schema: Json): Json {
  const wrap = (s: unknown) => (isObject(s) && typeof s.$id === 'string' ? { description: s.description, allOf: [s] } : s)
  const out: Json = { ...schema }
  if (schema.body) out.body = wrap(schema.body)
  if (isObject(schema.response)) {
    out.response = Object.fromEntries(
      Object.entries(schema.response).map(([status, r]) => {
        if (!isObject(r) || !isObject(r.content)) return [status, wrap(r)]
        const content = Object.fromEntries(Object.entries(r.content).map(([type, media]) => [type, isObject(media) ? { ...media, schema: wrap(media.schema) } : media]))
        return [status, { ...r, content }]
      }),
    )
  }
  return out
}

/** `{ allOf: [{ $ref }] }` (nameRoots' wrapper, once converted) → `{ $ref }`. */
function unwrap(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(unwrap)
  if (!isObject(node)) return node
  const only = Array.isArray(node.allOf) && node.allOf.length === 1 ? (node.allOf[0] as Json) : undefined
  if (only && typeof only.$ref === 'string' && Object.keys(node).every((k) => k === 'allOf' || k === 'description')) return { $ref: only.$ref }
  for (const [k, v] of Object.entries(node)) node[k] = unwrap(v)
  return node
}

/**
 * Gives every discriminator its mapping, read from the constant each named branch holds (Ajv,
 * which validates the same schemas, refuses a `mapping`, so the schemas cannot carry it). Without
 * one, a generator would take the branch's schema name for the value.
 */
function mapDiscriminators(doc: Doc): void {
  const schemas = doc.components?.schemas ?? {}
  const constOf = (schema: Json | undefined, prop: string): unknown => {
    const p = (schema?.properties as Record<string, Json> | undefined)?.[prop]
    if (p) return p.const ?? (Array.isArray(p.enum) && p.enum.length === 1 ? p.enum[0] : undefined)
    const first = ((schema?.anyOf ?? schema?.oneOf) as Json[] | undefined)?.[0]
    return first ? constOf(first, prop) : undefined
  }
  const visit = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(visit)
    if (!isObject(node)) return
    const d = node.discriminator as { propertyName: string; mapping?: Record<string, string> } | undefined
    const branches = (node.oneOf ?? node.anyOf) as Json[] | undefined
    if (d && !d.mapping && branches?.every((b) => typeof b.$ref === 'string')) {
      d.mapping = {}
      for (const b of branches) {
        const ref = b.$ref as string
        const value = constOf(schemas[ref.slice(COMPONENTS.length)], d.propertyName)
        if (typeof value === 'string') d.mapping[value] = ref
      }
    }
    for (const v of Object.values(node)) visit(v)
  }
  visit(doc)
}
