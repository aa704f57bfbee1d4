import type { FastifyReply, FastifyRequest } from 'fastify'
import { ApiError } from '../errors.ts'

const NUL = '\u0000'
const nulRefusal = (what: string) => new ApiError('invalid_request', `${what} holds NUL (U+0000), which no text sent to this service may contain.`)

/**
 * How deep free-form JSON in a request (a function's `parameters`, an agent's `text`, a required
 * action's `output`) may nest. Stored values are written with JSON.stringify, which recurses and
 * overflows the stack a few thousand levels down; refusing at the door keeps that a 400.
 */
export const MAX_JSON_DEPTH = 64

type Schema = {
  type?: unknown
  properties?: Record<string, Schema>
  patternProperties?: Record<string, Schema>
  additionalProperties?: boolean | Schema
  items?: Schema | Schema[]
  anyOf?: Schema[]
  oneOf?: Schema[]
  allOf?: Schema[]
}

const alternatives = (s: Schema): Schema[] => [s, ...(s.anyOf ?? []), ...(s.oneOf ?? []), ...(s.allOf ?? [])]

/** The schema a body's own structure gives a child, or undefined where the value is the caller's own JSON. */
function childSchema(schema: Schema, key: string | number): Schema | undefined {
  for (const alt of alternatives(schema)) {
    if (typeof key === 'number' && alt.items && !Array.isArray(alt.items)) return alt.items
    if (typeof key === 'string' && alt.properties?.[key]) return alt.properties[key]
  }
  return undefined
}

/** A value the schema says nothing more about inside: everything below it is the caller's. */
const isFreeForm = (schema: Schema | undefined): boolean =>
  schema === undefined || alternatives(schema).every((s) => s.type === undefined && !s.properties && !s.items) || (schema.type === 'object' && !schema.properties && (schema.patternProperties !== undefined || typeof schema.additionalProperties === 'object'))

const segment = (path: string, key: string | number): string => (typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : key)

/**
 * Throws 400 naming the field whose free-form value nests deeper than MAX_JSON_DEPTH, or a string
 * (or key) holding NUL, which PostgreSQL cannot store in text. Walks with a stack of its own: a
 * value thousands of levels deep would overflow a recursive walk too.
 */
export function checkBody(body: unknown, schema: unknown): void {
  type Frame = { value: unknown; path: string; schema: Schema | undefined; field: string | null; depth: number }
  const stack: Frame[] = [{ value: body, path: '', schema: schema as Schema | undefined, field: null, depth: 0 }]
  while (stack.length > 0) {
    const f = stack.pop()!
    if (typeof f.value === 'string' && f.value.includes(NUL)) throw nulRefusal(f.path ? `"${f.path}"` : 'The request body')
    if (f.value === null || typeof f.value !== 'object') continue
    let field = f.field
    let depth = f.depth
    if (field === null && isFreeForm(f.schema)) {
      field = f.path
      depth = 0
    }
    if (field !== null && ++depth > MAX_JSON_DEPTH) {
      throw new ApiError('invalid_request', `"${field || 'the request body'}" nests deeper than ${MAX_JSON_DEPTH} levels; free-form JSON may nest at most ${MAX_JSON_DEPTH} deep.`)
    }
    const entries: [string | number, unknown][] = Array.isArray(f.value) ? f.value.map((v, i) => [i, v]) : Object.entries(f.value)
    for (const [key, value] of entries) {
      if (typeof key === 'string' && key.includes(NUL)) throw nulRefusal(`A key of ${f.path ? `"${f.path}"` : 'the request body'}`)
      stack.push({ value, path: segment(f.path, key), schema: field === null && f.schema ? childSchema(f.schema, key) : undefined, field, depth })
    }
  }
}

/**
 * Path parameters and query values holding NUL: an id never does (404, as for any id not held),
 * and a query value with one could only fail in the store. The preview path after the session is
 * the site's own and is not looked at.
 */
export function refuseNulInUrl(passThrough: boolean) {
  return function refuseNul(req: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void {
    try {
      checkUrl(req, passThrough)
    } catch (err) {
      return done(err as Error)
    }
    done()
  }
}

function checkUrl(req: FastifyRequest, passThrough: boolean): void {
  // Decoded ids and query values can hold NUL only where the URL carries it, raw or as %00: most
  // requests are cleared here without walking their parameters.
  if (!req.url.includes('%00') && !req.url.includes(NUL)) return
  for (const [name, value] of Object.entries((req.params ?? {}) as Record<string, string>)) {
    if (name !== '*' && value.includes(NUL)) {
      throw new ApiError('not_found', `No endpoint or object at ${req.url.split('?')[0]}: an id never holds NUL (U+0000).`)
    }
  }
  if (passThrough) return
  for (const [name, value] of Object.entries((req.query ?? {}) as Record<string, unknown>)) {
    if (name.includes(NUL) || [value].flat().some((v) => typeof v === 'string' && v.includes(NUL))) throw nulRefusal(`Query parameter "${name}"`)
  }
}
