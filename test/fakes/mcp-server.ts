// A real MCP server for tests, written with the MCP SDK and served over streamable HTTP: tools
// with and without readOnlyHint, one that answers with an image, one slower than any test's
// timeout, and a bearer check so that a missing credential fails the connection.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js'
import { z } from 'zod'

/** A 1×1 PNG. */
export const TINY_PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=='

export type FakeMcp = {
  url: string
  /** Every tool call, in order: which tool and with what arguments. */
  calls: { tool: string; args: unknown }[]
  /** Authorization and other headers of every HTTP request the server received. */
  headers: http.IncomingHttpHeaders[]
  close(): Promise<void>
}

function build(calls: FakeMcp['calls']): McpServer {
  const server = new McpServer({ name: 'fake-docs', version: '1.0.0' })
  server.registerTool(
    'search',
    { description: 'Search the docs.', inputSchema: { q: z.string() }, annotations: { readOnlyHint: true } },
    async ({ q }) => {
      calls.push({ tool: 'search', args: { q } })
      return { content: [{ type: 'text', text: `3 results for "${q}"` }] }
    },
  )
  server.registerTool(
    'create_note',
    { description: 'Create a note (changes things).', inputSchema: { title: z.string() }, outputSchema: { id: z.string() } },
    async ({ title }) => {
      calls.push({ tool: 'create_note', args: { title } })
      return { content: [{ type: 'text', text: `note "${title}" created` }], structuredContent: { id: 'note-1' } }
    },
  )
  server.registerTool('snapshot', { description: 'A picture of the docs.', annotations: { readOnlyHint: true } }, async () => {
    calls.push({ tool: 'snapshot', args: {} })
    return { content: [{ type: 'text', text: 'the front page' }, { type: 'image', data: TINY_PNG, mimeType: 'image/png' }] }
  })
  server.registerTool('slow', { description: 'Takes a long time.', annotations: { readOnlyHint: true } }, async () => {
    calls.push({ tool: 'slow', args: {} })
    await new Promise((r) => setTimeout(r, 30_000).unref())
    return { content: [{ type: 'text', text: 'finally' }] }
  })
  server.registerTool('hidden', { description: 'Never offered: not in allowed_tools.' }, async () => {
    calls.push({ tool: 'hidden', args: {} })
    return { content: [{ type: 'text', text: 'hidden' }] }
  })
  return server
}

/**
 * Starts the server on a loopback port; `authorization`, when given, is required of every request.
 * `sseOnly`: an older server that speaks only the HTTP+SSE transport (GET for the stream, POST to
 * the endpoint it names), refusing the streamable HTTP one.
 */
export async function startFakeMcp(opts: { authorization?: string; sseOnly?: boolean } = {}): Promise<FakeMcp> {
  const calls: FakeMcp['calls'] = []
  const headers: FakeMcp['headers'] = []
  const sse = new Map<string, SSEServerTransport>()
  const httpServer = http.createServer(async (req, res) => {
    headers.push(req.headers)
    if (opts.authorization !== undefined && req.headers.authorization !== opts.authorization) {
      res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"unauthorized"}')
      return
    }
    if (opts.sseOnly) {
      if (req.method === 'GET' && req.url === '/mcp') {
        const transport = new SSEServerTransport('/messages', res)
        sse.set(transport.sessionId, transport)
        res.on('close', () => sse.delete(transport.sessionId))
        await build(calls).connect(transport)
        return
      }
      const session = new URL(req.url!, 'http://x').searchParams.get('sessionId')
      const transport = req.method === 'POST' && req.url?.startsWith('/messages') ? sse.get(session ?? '') : undefined
      if (!transport) return void res.writeHead(405).end()
      await transport.handlePostMessage(req, res)
      return
    }
    if (req.url !== '/mcp') return void res.writeHead(404).end()
    // Stateless: a server and transport per request, as the SDK's examples do.
    const server = build(calls)
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined })
    res.on('close', () => {
      void transport.close()
      void server.close()
    })
    await server.connect(transport)
    const chunks: Buffer[] = []
    for await (const c of req) chunks.push(c as Buffer)
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined
    await transport.handleRequest(req, res, body)
  })
  await new Promise<void>((r) => httpServer.listen(0, '127.0.0.1', r))
  const { port } = httpServer.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    headers,
    close: () => new Promise((r) => (httpServer.closeAllConnections(), httpServer.close(() => r()))),
  }
}
