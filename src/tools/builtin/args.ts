import type { ToolOutcome } from './builtin-tool.ts'

/**
 * The arguments of a built-in tool, declared once: the JSON Schema the model sees and the check
 * its call goes through are made from the same declaration, so they cannot drift apart.
 */
export type FieldSpec = {
  type: 'string' | 'integer' | 'number' | 'boolean'
  description: string
  required?: boolean
  minimum?: number
  maximum?: number
  /** File content may hold any character; every other string goes to a path or a shell and may not hold NUL. */
  anyText?: boolean
}
export type Fields = Record<string, FieldSpec>

type ValueOf<S extends FieldSpec> = S['type'] extends 'string' ? string : S['type'] extends 'boolean' ? boolean : number
export type Args<F extends Fields> = { [K in keyof F]: F[K]['required'] extends true ? ValueOf<F[K]> : ValueOf<F[K]> | undefined }

export function schemaOf(fields: Fields): Record<string, unknown> {
  const properties: Record<string, unknown> = {}
  for (const [name, f] of Object.entries(fields)) {
    properties[name] = {
      type: f.type,
      description: f.description,
      ...(f.minimum !== undefined ? { minimum: f.minimum } : {}),
      ...(f.maximum !== undefined ? { maximum: f.maximum } : {}),
    }
  }
  const required = Object.entries(fields).filter(([, f]) => f.required).map(([n]) => n)
  return { type: 'object', properties, required, additionalProperties: false }
}

const typeOk = (t: FieldSpec['type'], v: unknown) =>
  t === 'string' ? typeof v === 'string' : t === 'boolean' ? typeof v === 'boolean' : t === 'integer' ? Number.isInteger(v) : typeof v === 'number' && Number.isFinite(v)

const article = (t: string) => (t === 'integer' ? 'an integer' : `a ${t}`)

/** Checks a call's arguments; the error names the field, for the model to try again. */
export function checkArgs<F extends Fields>(fields: F, args: unknown): { ok: true; args: Args<F> } | { ok: false; error: string } {
  if (!args || typeof args !== 'object' || Array.isArray(args)) return { ok: false, error: 'the arguments must be a JSON object' }
  const given = args as Record<string, unknown>
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(given)) {
    if (!Object.hasOwn(fields, key)) return { ok: false, error: `unknown argument "${key}"; expected ${Object.keys(fields).map((k) => `"${k}"`).join(', ')}` }
  }
  for (const [name, f] of Object.entries(fields)) {
    const v = given[name]
    // Some providers' strict modes send null for an optional argument left out.
    if (v === undefined || (v === null && !f.required)) {
      if (f.required) return { ok: false, error: `missing required argument "${name}" (${f.type})` }
      continue
    }
    if (!typeOk(f.type, v)) return { ok: false, error: `argument "${name}" must be ${article(f.type)}, not ${v === null ? 'null' : typeof v}` }
    if (f.minimum !== undefined && (v as number) < f.minimum) return { ok: false, error: `argument "${name}" must be at least ${f.minimum}` }
    if (f.maximum !== undefined && (v as number) > f.maximum) return { ok: false, error: `argument "${name}" must be at most ${f.maximum}` }
    if (typeof v === 'string' && !f.anyText && v.includes('\0')) return { ok: false, error: `argument "${name}" holds a NUL byte` }
    out[name] = v
  }
  return { ok: true, args: out as Args<F> }
}

export function failed(output: string, summary: string): ToolOutcome {
  return { output, isError: true, summary, changes: [] }
}

export function cancelledOutcome(): ToolOutcome {
  return { output: 'Cancelled before it ran.', isError: true, summary: 'cancelled', changes: [], cancelled: true }
}
