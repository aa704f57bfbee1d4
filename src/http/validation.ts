import { Ajv, type ErrorObject } from 'ajv'
import addFormats from 'ajv-formats'
import type { FastifySchemaCompiler } from 'fastify'

/**
 * Two validators: bodies are checked exactly as sent (no type coercion, so a metadata value 5 is
 * refused rather than turned into "5"); query strings and path parameters arrive as text and are
 * coerced. Neither strips unknown fields: the specification wants them refused by name.
 */
function makeAjv(coerce: boolean): Ajv {
  const ajv = new Ajv({ discriminator: true, coerceTypes: coerce ? 'array' : false, useDefaults: true, removeAdditional: false, allErrors: false, strict: false, verbose: true })
  ;(addFormats as unknown as (a: Ajv) => void)(ajv)
  return ajv
}
const bodyAjv = makeAjv(false)
const textAjv = makeAjv(true)

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  const ajv = httpPart === 'body' ? bodyAjv : textAjv
  return ajv.compile(withoutIds(schema) as object) as never
}

/**
 * A shape's `$id` names it in the OpenAPI description (http/openapi.ts); nothing refers to it by
 * that id. Ajv would register it, and refuse a schema holding one shape twice (a session's tools
 * and its agent's) or two routes holding the same one, so the validators are built without ids.
 */
function withoutIds(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withoutIds)
  if (typeof schema !== 'object' || schema === null) return schema
  return Object.fromEntries(Object.entries(schema).flatMap(([k, v]) => (k === '$id' ? [] : [[k, withoutIds(v)]])))
}

/**
 * Whether a request body must be sent at all: only when its schema needs a field. A body whose
 * fields are all optional may be left out (no body, no Content-Type) and is read as {}.
 */
export function bodyRequired(schema: unknown): boolean {
  const s = (schema ?? {}) as { type?: unknown; required?: unknown[]; minProperties?: number }
  return s.type !== 'object' || (s.required?.length ?? 0) > 0 || (s.minProperties ?? 0) > 0
}

/** Fields each tool entry type accepts, for the message that refuses an unknown one. Filled by the tools schema. */
export const toolEntryFields = new Map<string, string[]>()

const dotted = (instancePath: string): string =>
  instancePath
    .split('/')
    .filter(Boolean)
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((acc, p) => (/^\d+$/.test(p) ? `${acc}[${p}]` : acc ? `${acc}.${p}` : p), '')

function valueAt(root: unknown, instancePath: string): unknown {
  let cur = root
  for (const p of instancePath.split('/').filter(Boolean)) {
    if (cur === null || typeof cur !== 'object') return undefined
    cur = (cur as Record<string, unknown>)[p.replace(/~1/g, '/').replace(/~0/g, '~')]
  }
  return cur
}

/** The values an enum or const error accepts; none for any other error. */
function allowedBy(e: ErrorObject): unknown[] {
  const params = e.params as { allowedValues?: unknown[]; allowedValue?: unknown }
  if (e.keyword === 'enum') return params.allowedValues ?? []
  return e.keyword === 'const' ? [params.allowedValue] : []
}

/** One clear sentence from Ajv's errors; an unknown field is always named. */
export function describeValidation(errors: ErrorObject[], context: string, input: unknown): string {
  const unknown = errors.find((e) => e.keyword === 'additionalProperties')
  if (unknown) {
    const field = (unknown.params as { additionalProperty: string }).additionalProperty
    if (context === 'querystring') return `Unknown query parameter "${field}".`
    const where = dotted(unknown.instancePath)
    const full = where ? `${where}.${field}` : field
    const parent = valueAt(input, unknown.instancePath) as { type?: unknown } | undefined
    if (/(^|\.)tools\[\d+\]$/.test(where) && parent && typeof parent.type === 'string') {
      const accepted = toolEntryFields.get(parent.type)
      if (accepted) return `Unknown field "${full}": a tool entry of type "${parent.type}" accepts ${accepted.join(', ')}.`
    }
    return `Unknown field "${full}".`
  }
  const disc = errors.find((e) => e.keyword === 'discriminator')
  if (disc) {
    const where = dotted(disc.instancePath)
    return `"${where ? `${where}.` : ''}type" must be one of ${[...toolEntryFields.keys()].join(', ')}.`
  }
  const e = errors.find((x) => x.keyword !== 'anyOf' && x.keyword !== 'oneOf') ?? errors[0]!
  const where = dotted(e.instancePath)
  const label = context === 'querystring' ? `query parameter "${where}"` : context === 'params' ? `path parameter "${where}"` : where ? `"${where}"` : 'the request body'
  if (e.keyword === 'required') return `Missing required field "${where ? `${where}.` : ''}${(e.params as { missingProperty: string }).missingProperty}".`
  // A pattern means nothing to a caller: a schema may say in words what it allows (x-must-be).
  const mustBe = (e.parentSchema as { 'x-must-be'?: string } | undefined)?.['x-must-be']
  if (e.keyword === 'pattern' && mustBe) return `${e.propertyName === undefined ? label : `${label} key ${JSON.stringify(e.propertyName)}`} must be ${mustBe}.`
  if (e.keyword === 'minProperties') return `${label} must carry at least one field.`
  if (e.keyword === 'enum' || e.keyword === 'const') {
    // A union of literals fails once per literal, each error naming one: the refusal names them all.
    const allowed = new Set(errors.filter((x) => x.instancePath === e.instancePath).flatMap(allowedBy))
    return `${label} must be one of ${[...allowed].map((v) => JSON.stringify(v)).join(', ')}.`
  }
  return `${label} ${e.message ?? 'is invalid'}.`
}
