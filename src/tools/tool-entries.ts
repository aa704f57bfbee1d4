import { ApiError } from '../errors.ts'
import type { ToolEntry, ToolEntryOut } from './tools.schema.ts'

/** Checks what a schema cannot say: MCP servers need exactly one of url and command; names are unique. */
export function checkToolEntries(tools: ToolEntry[], field: string): void {
  const seen = new Set<string>()
  tools.forEach((t, i) => {
    if (t.type === 'mcp' && (t.url === undefined) === (t.command === undefined)) {
      throw new ApiError('invalid_request', `${field}[${i}]: an mcp entry needs exactly one of "url" (remote) or "command" (local).`)
    }
    if (t.type === 'mcp' && t.url !== undefined && !/^https?:\/\//.test(t.url)) {
      throw new ApiError('invalid_request', `${field}[${i}].url must be an http(s) address.`)
    }
    const key = 'name' in t ? `${t.type}:${t.name}` : t.type
    if (seen.has(key)) throw new ApiError('invalid_request', `${field}[${i}] repeats ${'name' in t ? `the name "${t.name}"` : `the type "${t.type}"`}.`)
    seen.add(key)
  })
}

/** The entry as returned: every credential withheld, and named in `redacted`. */
export function redactToolEntry(t: ToolEntry): ToolEntryOut {
  if (t.type !== 'mcp') return { ...t }
  const { authorization, headers, env, ...rest } = t
  const redacted = [
    ...(authorization !== undefined ? ['authorization'] : []),
    ...Object.keys(headers ?? {}).map((h) => `headers.${h}`),
    ...Object.keys(env ?? {}).map((k) => `env.${k}`),
  ]
  return redacted.length > 0 ? { ...rest, redacted } : rest
}
