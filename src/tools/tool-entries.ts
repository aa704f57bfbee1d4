import { ApiError } from '../errors.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import type { ToolEntry, ToolEntryOut } from './tools.schema.ts'

/**
 * A tool entry as kept in the store: an MCP entry's credentials (authorization, header values,
 * environment values) sealed together in `secrets_enc`, and their names in `redacted`, so the
 * store never holds them in plain text and a response can say what was withheld without the key.
 */
export type StoredToolEntry = Exclude<ToolEntry, { type: 'mcp' }> | (Omit<Extract<ToolEntry, { type: 'mcp' }>, 'authorization' | 'headers' | 'env'> & { redacted?: string[]; secrets_enc?: string })

type McpSecrets = { authorization?: string; headers?: Record<string, string>; env?: Record<string, string> }

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

/** Checked entries in their stored form: credentials sealed. */
export function sealToolEntries(box: SecretBox, tools: ToolEntry[], field: string): StoredToolEntry[] {
  checkToolEntries(tools, field)
  return tools.map((t) => {
    if (t.type !== 'mcp') return t
    const { authorization, headers, env, ...rest } = t
    const redacted = [
      ...(authorization !== undefined ? ['authorization'] : []),
      ...Object.keys(headers ?? {}).map((h) => `headers.${h}`),
      ...Object.keys(env ?? {}).map((k) => `env.${k}`),
    ]
    if (redacted.length === 0) return rest
    const secrets: McpSecrets = { authorization, headers, env }
    return { ...rest, redacted, secrets_enc: box.seal(JSON.stringify(secrets)) }
  })
}

/** An entry with its credentials back, for the one place that uses them (connecting to the server). */
export function openToolEntry(box: SecretBox, t: StoredToolEntry): ToolEntry {
  if (t.type !== 'mcp' || t.secrets_enc === undefined) {
    if (t.type !== 'mcp') return t
    const { redacted: _r, secrets_enc: _s, ...rest } = t
    return rest
  }
  const { redacted: _r, secrets_enc, ...rest } = t
  const secrets = JSON.parse(box.open(secrets_enc)) as McpSecrets
  return { ...rest, ...(secrets.authorization !== undefined ? { authorization: secrets.authorization } : {}), ...(secrets.headers ? { headers: secrets.headers } : {}), ...(secrets.env ? { env: secrets.env } : {}) }
}

/** The entry as returned: every credential withheld, and named in `redacted`. */
export function redactToolEntry(t: StoredToolEntry): ToolEntryOut {
  if (t.type !== 'mcp') return { ...t }
  // Credentials in plain text never leave, even from a row stored before they were sealed.
  const { secrets_enc: _s, authorization: _a, headers: _h, env: _e, ...rest } = t as Extract<StoredToolEntry, { type: 'mcp' }> & { authorization?: unknown; headers?: unknown; env?: unknown }
  return rest
}
