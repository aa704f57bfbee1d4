import { before, it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren, type Warren } from './harness.ts'
import { expectError } from './expect.ts'
import { ErrorStatus } from '../src/errors.ts'
import { PERSISTED_PUBLIC_TYPES, PUBLISHED_EVENTS, WEBHOOK_EVENT_TYPES } from '../src/events/vocabulary.ts'
import { deliveryBody } from '../src/webhooks/delivery-body.ts'
import { inlineRefs } from './openapi-refs.ts'

type Operation = {
  operationId?: string
  security?: unknown[]
  parameters?: { in: string; name: string; schema?: { type?: string; minimum?: number } }[]
  responses: Record<string, { description?: string; content?: { 'application/json'?: { schema?: ErrorSchema } } }>
  requestBody?: { required?: boolean; content?: { 'application/json'?: { schema?: { required?: string[]; minProperties?: number } } } }
}
type ErrorSchema = { required?: string[]; properties?: { error?: { required?: string[]; properties?: { code?: { enum?: string[] } } } } }
type Prop = { const?: unknown; enum?: unknown[]; type?: string }
type Branch = { required?: string[]; properties: Record<string, Prop> }
type Union = { anyOf?: (Branch & Union)[]; discriminator?: { propertyName: string; mapping?: Record<string, string> } }
/** The one value a schema allows: @fastify/swagger writes a const as a one-value enum. */
const constOf = (p: Prop | undefined) => p?.const ?? (p?.enum?.length === 1 ? p.enum[0] : undefined)
/** A union's object branches, a branch that is itself a union (agent.error's two sources) opened. */
const branchesOf = (u: Union | undefined): Branch[] => (u?.anyOf ?? []).flatMap((b) => (b.anyOf ? branchesOf(b) : [b]))
/** The constant a union's branches give to `key`, in order. */
const constsOf = (u: Union | undefined, key: string) => branchesOf(u).map((b) => constOf(b.properties[key]))

type Doc = {
  openapi: string
  info: { version: string; title: string }
  servers?: { url: string }[]
  paths: Record<string, Record<string, Operation>>
  security?: unknown[]
  components: { schemas: Record<string, any> }
  webhooks?: Record<string, { post?: Operation & { requestBody?: { content?: Record<string, { schema?: { $ref?: string } }> } } }>
}
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` })

const METHODS = ['get', 'post', 'put', 'patch', 'delete']
/** What anyone may read without a token: this description, and the metrics a scraper reads. */
const PUBLIC = new Set(['GET /v1/openapi.json', 'GET /metrics'])

/** Every "METHOD /path" the running app routes (HEAD left out), read from Fastify's own route tree. */
function routeTable(w: Warren): Set<string> {
  const out = new Set<string>()
  const stack: string[] = []
  for (const line of w.app.printRoutes({ commonPrefix: false }).split('\n')) {
    const m = /^(.*?)[├└]── (\S+)(?: \(([^)]*)\))?$/.exec(line)
    if (!m) continue
    const depth = m[1]!.length / 4
    stack.length = depth
    const full = (stack[depth - 1] ?? '') + m[2]!
    stack[depth] = full
    // The web console's static files are a page for people, not an API operation: not described.
    if (full.startsWith('/console')) continue
    for (const method of (m[3] ?? '').split(',').map((s) => s.trim()).filter((s) => s && s !== 'HEAD')) {
      out.add(`${method} ${full.replace(/:([A-Za-z_]+)/g, '{$1}')}`)
    }
  }
  return out
}

function operations(doc: Doc): [string, Operation][] {
  const ops: [string, Operation][] = []
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) if (METHODS.includes(method)) ops.push([`${method.toUpperCase()} ${path}`, op])
  }
  return ops
}

function assertErrorShape(where: string, schema: ErrorSchema | undefined): void {
  assert.ok(schema, `${where}: no JSON schema`)
  assert.deepEqual(schema.required, ['error'], `${where}: error body does not require "error"`)
  assert.deepEqual([...(schema.properties?.error?.required ?? [])].sort(), ['code', 'message', 'request_id'], where)
}

forEachDialect('OpenAPI description', (dialect) => {
  const w = useWarren(dialect)
  /** Named shapes read through the operations that use them. */
  let doc: Doc
  /** As served: shapes referred to by name. */
  let raw: Doc

  before(async () => {
    const res = await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })
    assert.equal(res.statusCode, 200, res.body.slice(0, 300))
    raw = res.json()
    doc = inlineRefs(raw)
  })

  it('is served without a token, as JSON, declaring OpenAPI 3.1 and version v1', async () => {
    const res = await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })
    assert.match(String(res.headers['content-type']), /^application\/json/)
    assert.ok(res.headers['x-request-id'])
    assert.match(doc.openapi, /^3\.1\./)
    assert.equal(doc.info.version, 'v1')
    assert.equal(typeof doc.info.title, 'string')
    // A bad or revoked token does not stand in the way either.
    assert.equal((await w().inject({ method: 'GET', url: '/v1/openapi.json', token: 'svc_pat_nonsense' })).statusCode, 200)
  })

  it('lists exactly the running route table', () => {
    const documented = new Set(operations(doc).map(([name]) => name))
    // printRoutes drops the static part before a wildcard (`/preview` then `*` for
    // `/preview/proxy/*`): such a route counts when a documented path whose last parameter is the
    // wildcard's, `{path}`, extends its prefix.
    const routed = new Set(
      [...routeTable(w())].map((name) => (name.endsWith('*') ? ([...documented].find((d) => d.endsWith('/{path}') && d.startsWith(name.slice(0, -1))) ?? name) : name)),
    )
    assert.ok(routed.size > 3, 'could not read the route table')
    assert.deepEqual([...documented].sort(), [...routed].sort())
    for (const name of ['GET /v1/health', 'POST /v1/tokens', 'GET /v1/tokens', 'DELETE /v1/tokens/{token_id}', 'GET /v1/openapi.json']) {
      assert.ok(documented.has(name), `${name} is not described`)
    }
  })

  it('names every operation with a unique operationId', () => {
    const ids = operations(doc).map(([name, op]) => {
      assert.equal(typeof op.operationId, 'string', `${name} has no operationId`)
      return op.operationId!
    })
    assert.equal(new Set(ids).size, ids.length, 'operationIds repeat')
    assert.equal(doc.paths['/v1/health']!.get!.operationId, 'getHealth')
    assert.equal(doc.paths['/v1/tokens']!.post!.operationId, 'createToken')
  })

  it('declares for every operation its success and its error responses, in the error shape', () => {
    for (const [name, op] of operations(doc)) {
      const statuses = Object.keys(op.responses)
      assert.ok(statuses.some((s) => /^2\d\d$/.test(s)), `${name}: no success response`)
      const isPublic = Array.isArray(op.security) && op.security.length === 0
      const wanted = isPublic ? ['400', '500'] : ['400', '401', '403', '429', '500', '503']
      if (name.includes('{')) wanted.push('404')
      for (const status of wanted) {
        assert.ok(statuses.includes(status), `${name} does not declare ${status}`)
      }
      for (const status of statuses.filter((s) => /^[45]\d\d$/.test(s))) {
        assertErrorShape(`${name} ${status}`, op.responses[status]!.content?.['application/json']?.schema)
      }
    }
  })

  it('lists under each error status every code the error table sends with it, and no other', () => {
    const codesOf = (status: number) =>
      Object.entries(ErrorStatus)
        .filter(([, s]) => s === status)
        .map(([c]) => c)
        .sort()
    // The table sends 503 with sandbox_unavailable as well as directory_unavailable, 500 with sandbox_error …
    assert.ok(codesOf(503).includes('sandbox_unavailable') && codesOf(500).includes('sandbox_error'))
    for (const [name, op] of operations(doc)) {
      for (const status of Object.keys(op.responses).filter((s) => /^[45]\d\d$/.test(s))) {
        const res = op.responses[status]!
        const codes = codesOf(Number(status))
        assert.ok(codes.length > 0, `${name} declares ${status}, which no code of the table is sent with`)
        assert.deepEqual([...(res.content?.['application/json']?.schema?.properties?.error?.properties?.code?.enum ?? [])].sort(), codes, `${name} ${status}: code enum`)
        for (const code of codes) assert.ok(res.description?.includes(code), `${name} ${status} does not name ${code}: ${res.description}`)
      }
    }
  })

  it("describes an item's detail as a union on detail.event covering every persisted published event", () => {
    const op = doc.paths['/v1/sessions/{session_id}/items']!.get! as unknown as { responses: { 200: { content: { 'application/json': { schema: any } } } } }
    const detail = op.responses[200].content['application/json'].schema.properties.data.items.properties.detail as Union
    assert.ok(Array.isArray(detail.anyOf), 'detail is not a union')
    const events = constsOf(detail, 'event')
    assert.deepEqual([...new Set(events)].sort(), [...PERSISTED_PUBLIC_TYPES].sort())
    for (const b of branchesOf(detail)) assert.ok(b.required?.includes('event'), `branch ${String(constOf(b.properties.event))} does not require event`)
    // Each branch carries its payload: tool.required has name and arguments (not toolName and args).
    const required = branchesOf(detail).find((b) => constOf(b.properties.event) === 'tool.required')!
    assert.deepEqual(Object.keys(required.properties).sort(), ['arguments', 'event', 'name', 'toolCallId'])
  })

  it("describes both event streams as text/event-stream whose frame data is a union covering every published event", () => {
    for (const path of ['/v1/sessions/{session_id}/events', '/v1/events']) {
      const op = doc.paths[path]!.get! as unknown as { responses: { 200: { content: Record<string, { schema: Union }> } } }
      const content = op.responses[200].content
      assert.deepEqual(Object.keys(content), ['text/event-stream'], path)
      const data = content['text/event-stream']!.schema
      assert.deepEqual([...new Set(constsOf(data, 'type'))].sort(), [...Object.keys(PUBLISHED_EVENTS), 'service.replay_truncated'].sort(), path)
      const text = branchesOf(data).find((b) => constOf(b.properties.type) === 'agent.text')!
      assert.equal(text.properties.seq?.type, 'null', 'a live event has seq null')
      const started = branchesOf(data).find((b) => constOf(b.properties.type) === 'turn.started')!
      assert.equal(started.properties.seq?.type, 'integer')
    }
  })

  it('requires the bearer token everywhere except on itself and the metrics', () => {
    assert.deepEqual(doc.security, [{ bearer: [] }])
    for (const [name, op] of operations(doc)) {
      if (PUBLIC.has(name)) assert.deepEqual(op.security, [], `${name} should need no token`)
      else assert.ok(op.security === undefined || op.security.length > 0, `${name} claims to need no token`)
    }
  })

  it('marks a request body required only where the body must carry a field', () => {
    let seen = 0
    for (const [name, op] of operations(doc)) {
      if (!op.requestBody) continue
      const schema = op.requestBody.content?.['application/json']?.schema
      const needsField = (schema?.required?.length ?? 0) > 0 || (schema?.minProperties ?? 0) > 0
      assert.equal(op.requestBody.required === true, needsField, `${name}: requestBody.required is ${op.requestBody.required}`)
      seen++
    }
    assert.ok(seen > 5, 'no request bodies described')
    assert.notEqual(doc.paths['/v1/sessions']!.post!.requestBody!.required, true, 'every field of a new session is optional')
    assert.equal(doc.paths['/v1/tokens']!.post!.requestBody!.required, true)
  })

  it('answers a POST whose body fields are all optional the same without a body as with {}', async () => {
    const optional = operations(doc).filter(([name, op]) => op.requestBody && op.requestBody.required !== true && name !== 'POST /v1/sessions')
    assert.ok(optional.length >= 3, `only ${optional.map(([n]) => n).join(', ')}`)
    for (const [name] of optional) {
      const [method, path] = name.split(' ') as ['POST', string]
      const url = path.replace(/\{[^}]+\}/g, 'x_probe')
      const withEmpty = await w().inject({ method, url, payload: {} })
      const withNone = await w().inject({ method, url })
      assert.equal(withNone.statusCode, withEmpty.statusCode, `${name}: ${withNone.body} vs ${withEmpty.body}`)
      assert.equal(withNone.json().error?.code, withEmpty.json().error?.code, name)
    }
  })

  it('documents Idempotency-Key on the endpoints that honour it', async () => {
    for (const [path, method] of [['/v1/tokens', 'post'], ['/v1/tokens/{token_id}', 'delete'], ['/v1/sessions', 'post'], ['/v1/sessions/{session_id}', 'delete']] as const) {
      const op = doc.paths[path]?.[method]
      if (!op) continue
      assert.ok(op.parameters?.some((p) => p.in === 'header' && p.name.toLowerCase() === 'idempotency-key'), `${method} ${path} does not document Idempotency-Key`)
    }
  })

  it('describes what the service actually answers: a documented path and method is routed', async () => {
    for (const [name] of operations(doc)) {
      const [method, path] = name.split(' ') as [string, string]
      const url = path.replace(/\{[^}]+\}/g, 'x_probe')
      const res = await w().inject({ method: method as 'GET', url: `${url}?probe_unknown_param=1`, token: null })
      // Unrouted would be 404/405; a routed endpoint refuses the missing token or the unknown parameter.
      assert.ok(res.statusCode !== 404 && res.statusCode !== 405, `${name} answered ${res.statusCode}`)
      if (!PUBLIC.has(name)) expectError(res, 401, 'authentication_error')
      else expectError(res, 400, 'invalid_request')
    }
  })

  it('names the shapes in components.schemas and refers to them, so generators name types after them', () => {
    const names = Object.keys(raw.components.schemas)
    for (const n of ['Session', 'SessionList', 'Turn', 'TurnList', 'Item', 'ItemDetail', 'Event', 'Preview', 'Artifact', 'Webhook', 'WebhookDelivery', 'ModelCredential', 'Agent', 'Token', 'ToolEntry', 'NotFoundError', 'BadRequestError']) {
      assert.ok(names.includes(n), `${n} is not a named shape: ${names.join(', ')}`)
    }
    const media = (path: string, method: string, status: string) => (raw.paths[path]![method]!.responses[status]!.content as Record<string, { schema: unknown }>)['application/json']!.schema
    assert.deepEqual(media('/v1/sessions/{session_id}', 'get', '200'), ref('Session'))
    assert.deepEqual(media('/v1/sessions', 'get', '200'), ref('SessionList'))
    assert.deepEqual(media('/v1/sessions/{session_id}', 'get', '404'), ref('NotFoundError'))
    assert.deepEqual(raw.paths['/v1/sessions']!.post!.requestBody!.content!['application/json']!.schema, ref('CreateSessionRequest'))
    assert.deepEqual(raw.components.schemas.SessionList.properties.data.items, ref('Session'))
    assert.deepEqual(raw.components.schemas.Item.properties.detail, ref('ItemDetail'))
    assert.deepEqual((raw.paths['/v1/events']!.get!.responses['200']!.content as Record<string, { schema: unknown }>)['text/event-stream']!.schema, ref('Event'))
    // Every reference points at a shape that is there.
    for (const m of JSON.stringify(raw).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)) assert.ok(names.includes(m[1]!), `${m[1]} is referred to but not described`)
  })

  it('discriminates the event and item unions and the tool entries, each value mapped to its named branch', () => {
    const mapped = (name: string, key: string, values: string[]) => {
      const u = raw.components.schemas[name] as Union
      assert.equal(u.discriminator?.propertyName, key, name)
      assert.deepEqual(Object.keys(u.discriminator!.mapping ?? {}).sort(), [...values].sort(), name)
      for (const [value, target] of Object.entries(u.discriminator!.mapping!)) {
        // The branch a value maps to allows that value, and it is one of the union's branches.
        assert.ok((u.anyOf ?? (u as { oneOf?: unknown[] }).oneOf ?? []).some((b) => JSON.stringify(b) === JSON.stringify({ $ref: target })), `${name}: ${target} is not a branch`)
        assert.ok(constsOf({ anyOf: [inlineRefs({ components: raw.components, s: { $ref: target } }).s as unknown as Branch & Union] }, key).every((c) => c === value), `${name}: ${target} does not hold ${value}`)
      }
    }
    mapped('ItemDetail', 'event', PERSISTED_PUBLIC_TYPES)
    mapped('Event', 'type', [...Object.keys(PUBLISHED_EVENTS), 'service.replay_truncated'])
    mapped('ToolEntry', 'type', ['mcp', 'function', 'web_search', 'web_fetch', 'image_search', 'browse', 'browser_act', 'screenshot'])
  })

  it('describes every webhook delivery in the webhooks section, and what the service sends fits it', async () => {
    assert.deepEqual(Object.keys(raw.webhooks ?? {}).sort(), [...WEBHOOK_EVENT_TYPES].sort())
    for (const [type, item] of Object.entries(raw.webhooks!)) {
      assert.deepEqual(item.post?.requestBody?.content?.['application/json']?.schema, ref('WebhookDelivery'), type)
      assert.deepEqual(item.post!.parameters!.map((p) => `${p.in} ${p.name}`).sort(), ['header x-service-signature', 'header x-service-timestamp'], type)
    }
    // The description's shape accepts the bodies delivery-body.ts writes, and nothing looser.
    const { Ajv } = await import('ajv')
    const validate = new Ajv({ strict: false }).compile(inlineRefs({ components: raw.components, s: ref('WebhookDelivery') }).s as object)
    for (const type of WEBHOOK_EVENT_TYPES) {
      const body = JSON.parse(deliveryBody({ type, createdAt: 1_700_000_000_000, sessionId: 'ses_1', turnId: type.startsWith('turn.') ? 'trn_1' : null, payload: {} }))
      assert.ok(validate(body), `${type}: ${JSON.stringify(validate.errors)}`)
    }
    assert.equal(validate({ object: 'event', type: 'agent.text', created_at: 1, data: { session_id: 's' } }), false, 'a type that is not a webhook event')
    assert.equal(validate({ object: 'event', type: 'session.idle', created_at: 1, data: { session_id: 's', session: {} } }), false, 'data embedding an object')
  })

  it('names the service itself as its server', () => {
    assert.deepEqual(raw.servers?.map((s) => s.url), [w().config.publicUrl])
  })

  it('writes header names as the specification does, the resume cursor as an integer, and the proxy wildcard under a legal name', () => {
    const param = (path: string, method: string, where: string) => (raw.paths[path]![method]!.parameters ?? []).filter((p) => p.in === where).map((p) => p.name)
    assert.deepEqual(param('/v1/sessions', 'post', 'header').sort(), ['Idempotency-Key', 'X-Warren-Source'])
    assert.deepEqual(param('/v1/sessions/{session_id}', 'delete', 'header'), ['Idempotency-Key'])
    for (const path of ['/v1/events', '/v1/sessions/{session_id}/events']) {
      assert.deepEqual(param(path, 'get', 'header'), ['Last-Event-ID'])
      const cursor = raw.paths[path]!.get!.parameters!.find((p) => p.name === 'last_event_id')!
      assert.equal(cursor.schema?.type, 'integer')
      assert.equal(cursor.schema?.minimum, 0)
    }
    const wildcard = Object.keys(raw.paths).filter((p) => p.startsWith('/v1/sessions/{session_id}/preview/proxy/'))
    assert.deepEqual(wildcard, ['/v1/sessions/{session_id}/preview/proxy/{path}'])
    for (const op of Object.values(raw.paths[wildcard[0]!]!)) assert.deepEqual(op.parameters!.filter((p) => p.in === 'path').map((p) => p.name), ['session_id', 'path'])
  })

  it('describes the response headers the service sets, each of them really sent', async () => {
    type Res = { headers?: Record<string, { $ref: string }> }
    const documented = (path: string, method: string, status: string) =>
      Object.keys((raw.paths[path]![method]!.responses[status] as Res).headers ?? {}).sort()
    const sent = async (url: string, token?: null) => {
      const res = await w().inject({ method: 'GET', url, token })
      return Object.keys(res.headers)
    }
    const limits = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'x-ratelimit-resource']
    assert.deepEqual(documented('/v1/sessions', 'get', '200'), ['x-request-id', ...limits].sort())
    assert.deepEqual(documented('/v1/openapi.json', 'get', '200'), ['x-request-id'])
    assert.deepEqual(documented('/v1/sessions', 'get', '429'), ['Retry-After', 'x-request-id'])
    for (const h of documented('/v1/sessions', 'get', '200')) assert.ok((await sent('/v1/sessions')).includes(h.toLowerCase()), `${h} is not sent`)
    assert.ok((await sent('/v1/openapi.json', null)).includes('x-request-id'))
    for (const name of Object.keys((raw.components as { headers?: object }).headers ?? {})) assert.ok(JSON.stringify(raw.paths).includes(`#/components/headers/${name}`), `${name} is described but never used`)
  })
})
