import { before, it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren, type Warren } from './harness.ts'
import { expectError } from './expect.ts'

type Operation = {
  operationId?: string
  security?: unknown[]
  parameters?: { in: string; name: string }[]
  responses: Record<string, { content?: { 'application/json'?: { schema?: ErrorSchema } } }>
  requestBody?: { required?: boolean; content?: { 'application/json'?: { schema?: { required?: string[]; minProperties?: number } } } }
}
type ErrorSchema = { required?: string[]; properties?: { error?: { required?: string[] } } }
type Doc = { openapi: string; info: { version: string; title: string }; paths: Record<string, Record<string, Operation>>; security?: unknown[] }

const METHODS = ['get', 'post', 'put', 'patch', 'delete']

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

  it('requires the bearer token everywhere except on itself', () => {
    assert.deepEqual(doc.security, [{ bearer: [] }])
    for (const [name, op] of operations(doc)) {
      if (name === 'GET /v1/openapi.json') assert.deepEqual(op.security, [], 'the description should need no token')
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
      if (name !== 'GET /v1/openapi.json') expectError(res, 401, 'authentication_error')
      else expectError(res, 400, 'invalid_request')
    }
  })
})
