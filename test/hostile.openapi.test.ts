import { it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { ACTIONS_ENV } from './turn-actions-helpers.ts'
import { inlineRefs } from './openapi-refs.ts'

type JsonSchema = { type?: string | string[]; properties?: Record<string, JsonSchema>; items?: JsonSchema }
type Operation = {
  operationId: string
  parameters?: { in: string; name: string }[]
  requestBody?: { content?: { 'application/json'?: { schema?: JsonSchema } } }
}
type Doc = { paths: Record<string, Record<string, Operation>> }
type Probe = { what: string; method: string; url: string; headers?: Record<string, string>; body?: string }

const DEEP = '{"a":'.repeat(3000) + '1' + '}'.repeat(3000)
const HUGE = JSON.stringify('x'.repeat(100 * 1024))
/** Path ids: NUL, a climb out, over the router's length limit, an emoji, SQL-ish quoting, undecodable. */
const BAD_IDS = ['%00', '..%2F..%2Fetc', 'i'.repeat(500), '%F0%9F%92%A9', "'%22%3B--", '%E0%A4%A']
/** Query values: NUL, long, negative, out of any range, not a number, brackets. */
const BAD_QUERY_VALUES = ['%00', 'q'.repeat(4000), '-1', '1e309', '%5B%5D', "'%22%5C"]
/** Bodies that are not the object any endpoint reads. */
const BAD_BODIES: [string, string][] = [
  ['malformed JSON', '{"a":'],
  ['an array', '[]'],
  ['a string', '"str"'],
  ['null', 'null'],
  ['a number', '12'],
  ['deep nesting', DEEP],
  ['an unknown field', '{"probe_unknown":1}'],
  ['__proto__', '{"__proto__":{"polluted":true}}'],
  ['constructor.prototype', '{"constructor":{"prototype":{"polluted":true}}}'],
]
const OTHER_MEDIA: [string, Record<string, string>, string][] = [
  ['text/plain', { 'content-type': 'text/plain' }, 'x'],
  ['JSON in UTF-16', { 'content-type': 'application/json; charset=utf-16' }, '{}'],
]

/**
 * Bodies each operation would accept, so that a hostile value in one field gets past "missing
 * required field" into the handler. Where an id is in the path the probes' ids are made up, so
 * those stop at 404; the creations run. No webhook (it would be delivered) and no connection
 * whose provider is asked for its models (it would go out to the network).
 */
const VALID_BODIES: Record<string, object> = {
  createToken: { scopes: ['sessions:read'], expires_in_days: 7 },
  createAgent: { name: 'probe', model: 'm1' },
  createEnvironmentProfile: { name: 'probe', env: { A: 'b' } },
  putEnvironmentTemplate: { name: 'probe' },
  createModelCredential: { provider: 'openai_compatible', api_key: 'sk-probe', base_url: 'http://127.0.0.1:9/v1', models: ['m1'] },
  sendMessage: { text: 'hello' },
  answerApproval: { approved: true },
  answerQuestion: { answer: 'yes' },
  putSessionTools: { tools: [] },
  uploadFiles: { files: [{ path: 'a.txt', content: 'eA==' }] },
}

/** Values of the wrong kind (and hostile values of the right kind) for one body field. */
function badValues(schema: JsonSchema): [string, string][] {
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type
  const out: [string, string][] = [['NUL in a string', '"a\\u0000b"'], ['a huge string', HUGE], ['deep nesting', DEEP]]
  if (type !== 'object') out.push(['an object', '{"x":{}}'])
  if (type !== 'array') out.push(['an array of 1000', `[${'1,'.repeat(999)}1]`])
  if (type === 'integer' || type === 'number') out.push(['1e308', '1e308'], ['-2^63', '-9223372036854775809'], ['2.5', '2.5'])
  if (type === 'array') out.push(['items of NUL', '["\\u0000"]'], ['items of objects', '[{"__proto__":{}}]'])
  return out
}

/**
 * Takes `k` items of `list` in turn, carrying on where the previous call stopped: every kind of
 * probe is sent, spread over the operations, so that the walk stays well under a minute.
 */
function rotation<T>(list: T[]): (k: number) => T[] {
  let next = 0
  return (k) => Array.from({ length: Math.min(k, list.length) }, () => list[next++ % list.length]!)
}

/** Every probe of one operation; `real` replaces {session_id} where given, otherwise ids are made up. */
function prober(): (method: string, template: string, op: Operation, real?: string) => Probe[] {
  const ids = rotation(BAD_IDS.slice(1))
  const queryValues = rotation(BAD_QUERY_VALUES.slice(1))
  const bodies = rotation(BAD_BODIES)
  const headerKinds = rotation(['unknown query key', 'long token', 'big header', 'idempotency key'])
  let field = 0
  return (method, template, op, real) => {
    const params = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!)
    const fill = (over: Record<string, string> = {}) =>
      template.replace(/\{([^}]+)\}/g, (_, name: string) => over[name] ?? (name === 'session_id' && real ? real : name === 'path' ? 'x' : 'x_probe'))
    const label = `${method} ${template}${real ? ' (a real session)' : ''}`
    const body = op.requestBody?.content?.['application/json']?.schema
    const fine = body ? '{}' : undefined
    const json = { 'content-type': 'application/json' }
    const probes: Probe[] = []
    for (const kind of headerKinds(2)) {
      if (kind === 'unknown query key') probes.push({ what: `${label} an unknown query key`, method, url: `${fill()}?probe%5Bx%5D=1&__proto__=1` })
      if (kind === 'long token') probes.push({ what: `${label} a long bad token`, method, url: fill(), headers: { authorization: `Bearer svc_pat_${'t'.repeat(8000)}` } })
      if (kind === 'big header') probes.push({ what: `${label} a 100 KB header`, method, url: fill(), headers: { 'x-probe': 'h'.repeat(100 * 1024) } })
      if (kind === 'idempotency key') probes.push({ what: `${label} a bad Idempotency-Key`, method, url: fill(), headers: { 'idempotency-key': 'k'.repeat(300), ...(fine ? json : {}) }, body: fine })
    }
    for (const q of (op.parameters ?? []).filter((p) => p.in === 'query')) {
      for (const v of [BAD_QUERY_VALUES[0]!, ...queryValues(1)]) probes.push({ what: `${label} ?${q.name}=${v.slice(0, 20)}`, method, url: `${fill()}?${q.name}=${v}` })
    }
    if (!real) {
      params.forEach((p, i) => {
        for (const id of [BAD_IDS[0]!, ...(i === 0 ? ids(1) : [])]) probes.push({ what: `${label} ${p}=${id.slice(0, 20)}`, method, url: fill({ [p]: id }), headers: fine ? json : {}, body: fine })
      })
    }
    if (method !== 'GET' && !real) {
      for (const [what, text] of bodies(3)) probes.push({ what: `${label} body: ${what}`, method, url: fill(), headers: json, body: text })
    }
    const valid = VALID_BODIES[op.operationId]
    for (const [name, schema] of Object.entries(body?.properties ?? {})) {
      const [nul, ...others] = badValues(schema)
      for (const [what, value] of [nul!, others[field++ % others.length]!]) {
        probes.push({ what: `${label} body.${name}: ${what}`, method, url: fill(), headers: json, body: `{"${name}":${value}}` })
        if (!valid) continue
        const rest = JSON.stringify({ ...valid, [name]: undefined }).slice(1, -1)
        probes.push({ what: `${label} valid body but ${name}: ${what}`, method, url: fill(), headers: json, body: `{${rest ? `${rest},` : ''}"${name}":${value}}` })
      }
    }
    return probes
  }
}

/** What is wrong with one answer, or null: under 500, with x-request-id, and every refusal in the error shape. */
async function problemWith(res: Response): Promise<string | null> {
  const id = res.headers.get('x-request-id')
  const type = res.headers.get('content-type') ?? ''
  if (res.status < 400 && !type.startsWith('application/json')) {
    await res.body?.cancel() // a stream, an archive, an artifact's bytes, a preview's page
    return res.status >= 500 ? `${res.status}` : id ? null : 'no x-request-id'
  }
  const text = await res.text()
  if (res.status >= 500) return `${res.status} ${text.slice(0, 300)}`
  if (!id) return `${res.status} without x-request-id: ${text.slice(0, 200)}`
  if (res.status < 400) return null
  let body: { error?: { code?: unknown; message?: unknown; request_id?: unknown } }
  try {
    body = JSON.parse(text)
  } catch {
    return `${res.status} not JSON: ${text.slice(0, 200)}`
  }
  const e = body.error
  if (Object.keys(body).join() !== 'error' || !e || Object.keys(e).sort().join() !== 'code,message,request_id') return `${res.status} not the error shape: ${text.slice(0, 200)}`
  if (typeof e.code !== 'string' || typeof e.message !== 'string' || e.message === '') return `${res.status} code or message missing: ${text.slice(0, 200)}`
  if (e.request_id !== id) return `${res.status} request_id ${String(e.request_id)} differs from x-request-id ${id}`
  return null
}

// Walks every operation of the live OpenAPI description with hostile ids, queries, headers and
// bodies: whatever it is sent, the service answers below 500, in the error shape, with its request id.
forEachDialect('hostile probes of every operation', (dialect) => {
  const w = useWarren(dialect, { env: { ...ACTIONS_ENV, WARREN_RATE_SESSIONS_PER_MIN: '100000' } })

  it('answers every probe below 500, each refusal in the error shape with x-request-id', async () => {
    const base = await w().listen()
    const auth = { authorization: `Bearer ${w().token}` }
    const doc = inlineRefs((await (await fetch(`${base}/v1/openapi.json`)).json()) as Doc)
    // A connection whose provider is nowhere (a closed port), so that a turn a probe might start fails at once.
    const mc = await w().inject({ method: 'POST', url: '/v1/model-credentials', payload: { provider: 'openai_compatible', api_key: 'sk-probe', base_url: 'http://127.0.0.1:9/v1', models: ['m1'] } })
    assert.equal(mc.statusCode, 201, mc.body)
    const session = await w().inject({ method: 'POST', url: '/v1/sessions', payload: { title: 'probed' } })
    assert.equal(session.statusCode, 201, session.body)
    const real = session.json().id as string

    // The valid bodies are valid: where nothing in the path can be missing, they are accepted.
    for (const [template, item] of Object.entries(doc.paths)) {
      const op = item.post
      if (!op || template.includes('{') || !VALID_BODIES[op.operationId]) continue
      const res = await w().inject({ method: 'POST', url: template, payload: VALID_BODIES[op.operationId] })
      assert.ok(res.statusCode < 300, `${op.operationId}: ${res.body}`)
    }

    const probes: Probe[] = []
    const probesOf = prober()
    for (const [template, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        probes.push(...probesOf(method.toUpperCase(), template, op))
        // Reads of a real session take hostile queries further, past the session's lookup.
        if (method === 'get' && template.includes('{session_id}') && !template.endsWith('/events')) probes.push(...probesOf('GET', template, op, real))
      }
    }
    for (const [what, headers, body] of OTHER_MEDIA) probes.push({ what: `POST /v1/tokens as ${what}`, method: 'POST', url: '/v1/tokens', headers, body })
    const failures: string[] = []
    for (const p of probes) {
      try {
        const res = await fetch(`${base}${p.url}`, { method: p.method, headers: { ...auth, ...p.headers }, body: p.body, signal: AbortSignal.timeout(30_000) })
        const problem = await problemWith(res)
        if (problem) failures.push(`${p.what}: ${problem}`)
      } catch (err) {
        failures.push(`${p.what}: ${(err as Error).message} ${String((err as { cause?: unknown }).cause ?? '')}`)
      }
    }
    // Probes that happened to be valid may have made sessions: they go, with their workspaces.
    const left = (await w().inject({ method: 'GET', url: '/v1/sessions?limit=100' })).json().data as { id: string }[]
    for (const s of left) await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
    assert.ok(left.length <= 5, `${left.length} sessions made by probes`)
    assert.ok(probes.length > 300, `only ${probes.length} probes`)
    assert.deepEqual(failures, [])
  })
})
