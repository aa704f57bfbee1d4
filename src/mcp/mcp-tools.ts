import type { ResultPart } from '../tools/result-parts.ts'
import type { StoredToolEntry } from '../tools/tool-entries.ts'

export type McpEntry = Extract<StoredToolEntry, { type: 'mcp' }>

export const mcpEntries = (tools: StoredToolEntry[] | null): McpEntry[] => (tools ?? []).filter((t): t is McpEntry => t.type === 'mcp')

/** A tool of an MCP server as the model is offered it. */
export type McpTool = {
  /** What the model sees: mcp__{server}__{tool}, made of what every provider accepts. */
  name: string
  server: string
  /** The server's own name for it. */
  tool: string
  description: string
  inputSchema: Record<string, unknown>
  /** The server annotates it readOnlyHint: true (only such tools run in read_only mode). */
  readOnly: boolean
  timeoutMs: number
}

/** Providers accept tool names of [a-zA-Z0-9_-], at most 64 characters. */
export function mcpToolName(server: string, tool: string): string {
  return `mcp__${server}__${tool}`.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, 64)
}

/** Default ceiling of one MCP call when the entry sets no timeout_seconds. */
export const DEFAULT_MCP_TIMEOUT_MS = 60_000

type ContentBlock = { type: string; text?: string; data?: string; mimeType?: string; resource?: { uri?: string; text?: string; mimeType?: string }; uri?: string; name?: string }

/** What the model receives from an MCP result: text, images as files, structured content as JSON. */
export type McpOutput = {
  text: string
  isError: boolean
  /** Set when the result holds images: the parts in order, images included. */
  parts?: ResultPart[]
}

export function mcpOutput(result: { content?: unknown; structuredContent?: unknown; isError?: unknown; toolResult?: unknown }): McpOutput {
  const blocks = (Array.isArray(result.content) ? result.content : []) as ContentBlock[]
  const parts: ResultPart[] = []
  for (const b of blocks) {
    if (b.type === 'text' && typeof b.text === 'string') parts.push({ type: 'text', text: b.text })
    else if (b.type === 'image' && typeof b.data === 'string') parts.push({ type: 'file', data: { type: 'data', data: b.data }, mediaType: b.mimeType ?? 'image/png' })
    else if (b.type === 'resource' && b.resource) parts.push({ type: 'text', text: b.resource.text ?? `[resource ${b.resource.uri ?? ''}]` })
    else if (b.type === 'resource_link') parts.push({ type: 'text', text: `[resource ${b.uri ?? ''}${b.name ? ` (${b.name})` : ''}]` })
    else if (b.type === 'audio') parts.push({ type: 'text', text: `[audio ${b.mimeType ?? ''} not shown]` })
  }
  if (result.structuredContent !== undefined && !parts.some((p) => p.type === 'text')) {
    parts.push({ type: 'text', text: JSON.stringify(result.structuredContent) })
  }
  if (blocks.length === 0 && result.toolResult !== undefined) parts.push({ type: 'text', text: JSON.stringify(result.toolResult) })
  const text = parts.map((p) => (p.type === 'text' ? p.text : `[image ${p.mediaType}]`)).join('\n')
  const hasImage = parts.some((p) => p.type === 'file')
  return { text, isError: result.isError === true, ...(hasImage ? { parts } : {}) }
}
