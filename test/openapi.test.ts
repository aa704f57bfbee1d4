import { before, it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren, type Warren } from './harness.ts'
import { expectError } from './expect.ts'
import { ErrorStatus } from '../src/errors.ts'
import { PERSISTED_PUBLIC_TYPES, PUBLISHED_EVENTS } from '../src/events/vocabulary.ts'

type Operation = {
  operationId?: string
  security?: unknown[]
  parameters?: { in: string; name: string }[]
  responses: Record<string, { description?: string; content?: { 'application/json'?: { schema?: ErrorSchema } } }>
  requestBody?: { required?: boolean; content?: { 'application/json'?: { schema?: { required?: string[]; minProperties?: number } } } }
}
type ErrorSchema = { required?: string[]; properties?: { error?: { required?: string[]; properties?: { code?: { enum?: string[] } } } } }
type Prop = { const?: unknown; enum?: unknown[]; type?: string }
type Branch = { required?: string[]; properties: Record<string, Prop> }
type Union = { anyOf?: Branch[] }
/** The one value a schema allows: @fastify/swagger writes a const as a one-value enum. */
const constOf = (p: Prop | undefined) => p?.const ?? (p?.enum?.length === 1 ? p.enum[0] : undefined)
/** The constant a union's branches give to `key`, in order. */
const constsOf = (u: Union | undefined, key: string) => (u?.anyOf ?? []).map((b) => constOf(b.properties[key]))

type Doc = { openapi: string; info: { version: string; title: string }; paths: Record<string, Record<string, Operation>>; security?: unknown[] }

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
  let doc: Doc

  before(async () => {
    const res = await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })
    assert.equal(res.statusCode, 200, res.body.slice(0, 300))
    doc = res.json()
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
    // `/preview/proxy/*`): such a route counts when a documented wildcard path extends its prefix.
    const routed = new Set(
      [...routeTable(w())].map((name) => (name.endsWith('*') ? ([...documented].find((d) => d.endsWith('/{*}') && d.startsWith(name.slice(0, -1))) ?? name) : name)),
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
    for (const b of detail.anyOf!) assert.ok(b.required?.includes('event'), `branch ${String(constOf(b.properties.event))} does not require event`)
    // Each branch carries its payload: tool.required has name and arguments (not toolName and args).
    const required = detail.anyOf!.find((b) => constOf(b.properties.event) === 'tool.required')!
    assert.deepEqual(Object.keys(required.properties).sort(), ['arguments', 'event', 'name', 'toolCallId'])
  })

  it("describes both event streams as text/event-stream whose frame data is a union covering every published event", () => {
    for (const path of ['/v1/sessions/{session_id}/events', '/v1/events']) {
      const op = doc.paths[path]!.get! as unknown as { responses: { 200: { content: Record<string, { schema: Union }> } } }
      const content = op.responses[200].content
      assert.deepEqual(Object.keys(content), ['text/event-stream'], path)
      const data = content['text/event-stream']!.schema
      assert.deepEqual([...new Set(constsOf(data, 'type'))].sort(), [...Object.keys(PUBLISHED_EVENTS), 'service.replay_truncated'].sort(), path)
      const text = data.anyOf!.find((b) => constOf(b.properties.type) === 'agent.text')!
      assert.equal(text.properties.seq?.type, 'null', 'a live event has seq null')
      const started = data.anyOf!.find((b) => constOf(b.properties.type) === 'turn.started')!
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
})
