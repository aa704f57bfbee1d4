import { jsonSchema, tool, type ToolSet } from 'ai'
import { BUILTIN_TOOLS } from '../tools/builtin/index.ts'
import type { ToolEntry } from '../tools/tools.schema.ts'
import type { StoredToolEntry } from '../tools/tool-entries.ts'
import type { Config } from '../config.ts'
import type { McpHub, McpUnavailable } from '../mcp/mcp-hub.ts'
import { mcpEntries, type McpTool } from '../mcp/mcp-tools.ts'
import { offeredNetworkTools, type NetworkTool } from '../tools/network/index.ts'

/** How the runner handles a call, by the tool's name. */
export type ToolKind = 'builtin' | 'todo' | 'question' | 'function' | 'network' | 'mcp' | 'unknown'

/** Everything a session's model may call beyond the built-in tools, for one step. */
export type ToolsInPlay = { functions: FunctionEntry[]; network: NetworkTool[]; mcp: McpTool[] }

export const TODO_TOOL = {
  name: 'todo_write',
  description: 'Replace your task list for this turn. Use it to plan multi-step work and mark progress; people following the session see it.',
  parameters: {
    type: 'object',
    properties: {
      items: {
        type: 'array',
        items: {
          type: 'object',
          properties: { label: { type: 'string' }, status: { type: 'string', enum: ['pending', 'in_progress', 'completed'] } },
          required: ['label', 'status'],
          additionalProperties: false,
        },
      },
    },
    required: ['items'],
    additionalProperties: false,
  },
}

export const QUESTION_TOOL = {
  name: 'ask_question',
  description:
    'Ask the person you work for a question and wait for the answer. Use it only when you cannot proceed without their decision; offer options when the choice is among known alternatives.',
  parameters: {
    type: 'object',
    properties: {
      question: { type: 'string' },
      options: { type: 'array', items: { type: 'string' } },
      allow_freeform: { type: 'boolean', description: 'Whether an answer outside the options is accepted (default true).' },
    },
    required: ['question'],
    additionalProperties: false,
  },
}

type FunctionEntry = Extract<ToolEntry, { type: 'function' }>

export const functionEntries = (tools: StoredToolEntry[] | null): FunctionEntry[] => (tools ?? []).filter((t): t is FunctionEntry => t.type === 'function')

/** Built-in names win: a caller's function cannot take over `bash` (nor an offered `web_fetch`). */
export function toolKind(name: string, { functions, network, mcp }: ToolsInPlay): ToolKind {
  if (BUILTIN_TOOLS.some((t) => t.name === name)) return 'builtin'
  if (name === TODO_TOOL.name) return 'todo'
  if (name === QUESTION_TOOL.name) return 'question'
  if (network.some((t) => t.type === name)) return 'network'
  if (functions.some((f) => f.name === name)) return 'function'
  if (mcp.some((t) => t.name === name)) return 'mcp'
  return 'unknown'
}

/** The tools the model is offered, without `execute`: the runner runs every call itself. */
export function offeredTools({ functions, network, mcp }: ToolsInPlay): ToolSet {
  const set: ToolSet = {}
  const add = (name: string, description: string, parameters: Record<string, unknown>) => {
    set[name] = tool({ description, inputSchema: jsonSchema(parameters as never) })
  }
  for (const t of BUILTIN_TOOLS) add(t.name, t.description, t.parameters)
  add(TODO_TOOL.name, TODO_TOOL.description, TODO_TOOL.parameters)
  add(QUESTION_TOOL.name, QUESTION_TOOL.description, QUESTION_TOOL.parameters)
  for (const t of network) add(t.type, t.description, t.parameters)
  for (const f of functions) {
    if (set[f.name]) continue
    add(f.name, f.description ?? `The caller's function ${f.name}.`, f.parameters ?? { type: 'object', properties: {} })
  }
  for (const t of mcp) if (!set[t.name]) add(t.name, t.description, t.inputSchema)
  return set
}

/**
 * What the session's model may call this step beyond the built-in tools, from its configuration:
 * its functions, the network tools offered, and the tools of its MCP servers (connected when
 * first needed, kept while connected), with the servers that could not be reached.
 */
export async function toolsInPlay(ctx: { config: Config; mcp: McpHub }, turn: { id: string; session_id: string }, tools: StoredToolEntry[] | null): Promise<{ inPlay: ToolsInPlay; unavailable: McpUnavailable[] }> {
  const servers = mcpEntries(tools)
  const listing = servers.length > 0 ? await ctx.mcp.list(turn.session_id, turn.id, servers) : { tools: [], unavailable: [] }
  return { inPlay: { functions: functionEntries(tools), network: offeredNetworkTools(ctx.config, tools), mcp: listing.tools }, unavailable: listing.unavailable }
}
