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

/**
 * Checked entries in their stored form: credentials sealed. An MCP entry's `redacted` names
 * credentials to keep from `current` (the configuration being replaced, its entry of the same
 * name); a name it does not hold is refused, and where nothing is replaced `redacted` is too.
 */
export function sealToolEntries(box: SecretBox, tools: ToolEntry[], field: string, current?: StoredToolEntry[] | null): StoredToolEntry[] {
  checkToolEntries(tools, field)
  return tools.map((given, i) => {
    if (given.type !== 'mcp') return given
    const t = given.redacted?.length ? keepRedacted(box, given, current, `${field}[${i}]`) : given
    const { authorization, headers, env, redacted: _kept, ...rest } = t
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

type McpIn = Extract<ToolEntry, { type: 'mcp' }>

/** The entry with the credentials its `redacted` names taken from the current entry of that name. */
function keepRedacted(box: SecretBox, t: McpIn, current: StoredToolEntry[] | null | undefined, where: string): McpIn {
  if (current === undefined) throw new ApiError('invalid_request', `${where}.redacted: there is no configuration here to keep credentials from; send them.`)
  const before = (current ?? []).find((c): c is Extract<StoredToolEntry, { type: 'mcp' }> => c.type === 'mcp' && c.name === t.name)
  const held = before ? openToolEntry(box, before) : null
  const old = held?.type === 'mcp' ? held : null
  const out: McpIn = { ...t, headers: { ...(t.headers ?? {}) }, env: { ...(t.env ?? {}) } }
  for (const name of t.redacted ?? []) {
    const [kind, key] = name.startsWith('headers.') ? ['headers', name.slice(8)] : name.startsWith('env.') ? ['env', name.slice(4)] : [name, '']
    const value = kind === 'authorization' ? old?.authorization : kind === 'headers' ? old?.headers?.[key] : kind === 'env' ? old?.env?.[key] : undefined
    if (value === undefined) throw new ApiError('invalid_request', `${where}.redacted names "${name}", which the current configuration of "${t.name}" does not hold; send the value.`)
    if (kind === 'authorization') out.authorization ??= value
    else if (kind === 'headers') out.headers![key] ??= value
    else out.env![key] ??= value
  }
  if (Object.keys(out.headers!).length === 0) delete out.headers
  if (Object.keys(out.env!).length === 0) delete out.env
  return out
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
