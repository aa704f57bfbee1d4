import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import type { SandboxProcess } from '../sandbox/sandbox.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import { quote } from '../shared/sh-quote.ts'
import { SandboxStdioTransport } from './sandbox-stdio-transport.ts'
import { openToolEntry } from '../tools/tool-entries.ts'
import type { PrivatePolicy } from '../shared/address-policy.ts'
import { guardedFetch } from './guarded-fetch.ts'
import { connectionFailure, withoutAddresses } from '../shared/connection-failure.ts'
import { logFailure, silentLog, type Log } from '../shared/log.ts'
import { DEFAULT_MCP_TIMEOUT_MS, mcpOutput, mcpToolName, type McpEntry, type McpOutput, type McpTool } from './mcp-tools.ts'

/** How long connecting to a server and listing its tools may take. */
const CONNECT_TIMEOUT_MS = 15_000

/** `fresh`: this very listing tried to connect (so the failure is news; later steps of the turn reuse it). */
export type McpUnavailable = { server: string; reason: string; required: boolean; fresh: boolean }
export type McpListing = { tools: McpTool[]; unavailable: McpUnavailable[] }

/**
 * The MCP servers of this process's sessions. A server is connected the first time a turn needs
 * it and its tools listed then; both are kept while it stays connected and its entry unchanged,
 * so later steps and turns pay nothing. A server that would not connect is tried again at the
 * next turn, not at every step of the same one.
 */
export type McpHub = {
  /** The tools of the session's MCP entries, and the servers that could not be reached. */
  list(sessionId: string, turnId: string, entries: McpEntry[]): Promise<McpListing>
  call(sessionId: string, tool: McpTool, args: Record<string, unknown>, signal: AbortSignal): Promise<McpOutput>
  /** Disconnects the session's servers (session deleted). */
  forget(sessionId: string): Promise<void>
  close(): Promise<void>
}

type Connection = {
  /** The entry as it was when connected: any change to it reconnects. */
  key: string
  client: Client | null
  tools: McpTool[]
  closed: boolean
  failure: { reason: string; turnId: string } | null
}

export type McpHubDeps = {
  box: SecretBox
  allowPrivate: PrivatePolicy
  /** Starts a local server's command in the session's sandbox (never on the host). */
  spawn(sessionId: string, req: { command: string; env?: Record<string, string> }): Promise<SandboxProcess>
  /** Where a connection that would not close is told (a local server's process may be left running). */
  log?: Log
}

export function mcpHub(deps: McpHubDeps): McpHub {
  const fetch = guardedFetch({ allowPrivate: deps.allowPrivate })
  const sessions = new Map<string, Map<string, Connection>>()
  const log = deps.log ?? silentLog
  const closeFailed = (sessionId: string, server: string) => logFailure(log, 'closing an MCP server connection failed', { component: 'mcp', session: sessionId, server })

  async function connect(sessionId: string, entry: McpEntry): Promise<{ client: Client; tools: McpTool[] }> {
    const full = openToolEntry(deps.box, entry)
    if (full.type !== 'mcp') throw new Error('not an mcp entry')
    const attempt = async (transport: Transport): Promise<Client> => {
      const client = new Client({ name: 'warren', version: '1' })
      try {
        await client.connect(transport, { timeout: CONNECT_TIMEOUT_MS })
        return client
      } catch (err) {
        // A failed transport is closed, or it would go on retrying (an EventSource reconnects).
        await client.close().catch(closeFailed(sessionId, entry.name))
        await transport.close().catch(closeFailed(sessionId, entry.name))
        const said = transport instanceof SandboxStdioTransport ? transport.stderrTail : ''
        throw said ? new Error(`${(err as Error).message}; the server said: ${said}`) : err
      }
    }
    let client: Client
    if (full.command !== undefined) {
      // A local server runs in the session's sandbox, as its user, with its network.
      const command = [full.command, ...(full.args ?? [])].map(quote).join(' ')
      client = await attempt(new SandboxStdioTransport(() => deps.spawn(sessionId, { command, env: full.env })))
    } else {
      client = await remote(full.url!, attempt, full.authorization, full.headers)
    }
    const allowed = full.allowed_tools ? new Set(full.allowed_tools) : null

    const tools: McpTool[] = []
    let cursor: string | undefined
    do {
      const page = await client.listTools(cursor ? { cursor } : undefined, { timeout: CONNECT_TIMEOUT_MS })
      for (const t of page.tools) {
        if (allowed && !allowed.has(t.name)) continue
        tools.push({
          name: mcpToolName(full.name, t.name),
          server: full.name,
          tool: t.name,
          description: t.description ?? t.title ?? `${t.name} (from the MCP server ${full.name})`,
          inputSchema: (t.inputSchema ?? { type: 'object', properties: {} }) as Record<string, unknown>,
          readOnly: t.annotations?.readOnlyHint === true,
          timeoutMs: (full.timeout_seconds ?? 0) * 1000 || DEFAULT_MCP_TIMEOUT_MS,
        })
      }
      cursor = page.nextCursor
    } while (cursor)
    return { client, tools }
  }

  /** A remote server over streamable HTTP; older servers speak HTTP+SSE only, tried once the current transport failed. */
  async function remote(address: string, attempt: (t: Transport) => Promise<Client>, authorization?: string, extra?: Record<string, string>): Promise<Client> {
    const headers: Record<string, string> = { ...(extra ?? {}) }
    if (authorization !== undefined) headers.authorization = authorization
    const url = new URL(address)
    try {
      return await attempt(new StreamableHTTPClientTransport(url, { fetch, requestInit: { headers } }))
    } catch (streamable) {
      try {
        return await attempt(new SSEClientTransport(url, { fetch, requestInit: { headers }, eventSourceInit: { fetch: (u, init) => fetch(u, { ...init, headers: { ...Object.fromEntries(new Headers(init?.headers)), ...headers } }) } }))
      } catch {
        throw streamable
      }
    }
  }

  /** Why a server could not be reached, in words a person can act on, never with its credentials. */
  const reasonOf = (err: unknown, entry: McpEntry): string => {
    let message = err instanceof Error ? err.message : String(err)
    const cause = (err as { cause?: { message?: string } })?.cause?.message
    if (cause && !message.includes(cause)) message = `${message}: ${cause}`
    // A socket's own words name the address it connected to (for a name, what it resolved to): said by its code instead.
    message = connectionFailure(err) ?? withoutAddresses(message, err)
    if (entry.secrets_enc) {
      const full = openToolEntry(deps.box, entry)
      if (full.type === 'mcp') for (const secret of [full.authorization, ...Object.values(full.headers ?? {}), ...Object.values(full.env ?? {})]) if (secret) message = message.split(secret).join('[withheld]')
    }
    return message
  }

  return {
    async list(sessionId, turnId, entries) {
      let conns = sessions.get(sessionId)
      if (!conns) sessions.set(sessionId, (conns = new Map()))
      const listing: McpListing = { tools: [], unavailable: [] }
      // A server no longer configured (PUT /tools) is disconnected, its local process stopped.
      const names = new Set(entries.map((e) => e.name))
      for (const [name, conn] of conns) if (!names.has(name)) (conns.delete(name), void conn.client?.close().catch(closeFailed(sessionId, name)))
      await Promise.all(
        entries.map(async (entry) => {
          const key = JSON.stringify(entry)
          let conn = conns.get(entry.name)
          if (conn && (conn.key !== key || conn.closed || (conn.failure && conn.failure.turnId !== turnId))) {
            await conn.client?.close().catch(closeFailed(sessionId, entry.name))
            conn = undefined
          }
          const fresh = !conn
          if (!conn) {
            conn = { key, client: null, tools: [], closed: false, failure: null }
            conns.set(entry.name, conn)
            try {
              const { client, tools } = await connect(sessionId, entry)
              const c = conn
              // Forgotten (the session deleted, or its servers closed) while this connected: not kept.
              if (sessions.get(sessionId) !== conns || conns.get(entry.name) !== c) {
                await client.close().catch(closeFailed(sessionId, entry.name))
                c.closed = true
              }
              c.client = client
              c.tools = tools
              client.onclose = () => (c.closed = true)
            } catch (err) {
              conn.failure = { reason: reasonOf(err, entry), turnId }
            }
          }
          if (conn.failure) listing.unavailable.push({ server: entry.name, reason: conn.failure.reason, required: entry.required === true, fresh })
          else listing.tools.push(...conn.tools)
        }),
      )
      return listing
    },
    async call(sessionId, tool, args, signal) {
      const client = sessions.get(sessionId)?.get(tool.server)?.client
      if (!client) return { text: `The MCP server ${tool.server} is not connected.`, isError: true }
      try {
        const result = await client.callTool({ name: tool.tool, arguments: args }, undefined, { timeout: tool.timeoutMs, signal })
        return mcpOutput(result)
      } catch (err) {
        if (signal.aborted) throw signal.reason
        return { text: `The MCP server ${tool.server} failed the call: ${(err as Error).message}`, isError: true }
      }
    },
    async forget(sessionId) {
      const conns = sessions.get(sessionId)
      sessions.delete(sessionId)
      await Promise.all([...(conns?.entries() ?? [])].map(([name, c]) => c.client?.close().catch(closeFailed(sessionId, name))))
    },
    async close() {
      await Promise.all([...sessions.keys()].map((id) => this.forget(id)))
    },
  }
}
