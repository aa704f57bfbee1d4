import { Type, type Static, type TObject } from 'typebox'
import { toolEntryFields } from '../http/validation.ts'

/** Sandbox network tools, selected by naming their types (spec: Tool entry). */
export const NETWORK_TOOL_TYPES = ['web_search', 'web_fetch', 'image_search', 'browse', 'browser_act', 'screenshot'] as const
export type NetworkToolType = (typeof NETWORK_TOOL_TYPES)[number]

const Name = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', description: 'What the model sees (MCP tools as mcp__{server}__{tool}).' })
const Timeout = Type.Integer({ minimum: 1, maximum: 3600 })

export const McpToolEntry = Type.Object(
  {
    type: Type.Literal('mcp'),
    name: Name,
    url: Type.Optional(Type.String({ maxLength: 2000, description: 'Remote server address (streamable HTTP).' })),
    command: Type.Optional(Type.String({ maxLength: 2000, description: 'Local server command, run inside the sandbox.' })),
    args: Type.Optional(Type.Array(Type.String({ maxLength: 2000 }), { maxItems: 100 })),
    allowed_tools: Type.Optional(Type.Array(Type.String({ maxLength: 200 }), { maxItems: 500 })),
    required: Type.Optional(Type.Boolean({ description: 'When false, a server that will not connect is skipped and mcp.unavailable is emitted.' })),
    authorization: Type.Optional(Type.String({ maxLength: 8000, description: 'Write-only: sent as the Authorization header, never returned.' })),
    headers: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 8000 }), { description: 'Write-only header values, never returned.' })),
    env: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 8000 }), { description: 'Write-only environment of a local server, never returned.' })),
    redacted: Type.Optional(
      Type.Array(Type.String({ maxLength: 300 }), {
        maxItems: 200,
        description: 'As a response shows it: the credentials named here are kept from the configuration being replaced (PUT back what GET returned, and they stay). Only where a configuration is replaced.',
      }),
    ),
    description: Type.Optional(Type.String({ maxLength: 4000 })),
    timeout_seconds: Type.Optional(Timeout),
  },
  { additionalProperties: false, $id: 'McpToolEntry' },
)

export const FunctionToolEntry = Type.Object(
  {
    type: Type.Literal('function'),
    name: Name,
    description: Type.Optional(Type.String({ maxLength: 4000 })),
    parameters: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { description: 'JSON Schema of the arguments.' })),
    timeout_seconds: Type.Optional(Timeout),
  },
  { additionalProperties: false, $id: 'FunctionToolEntry' },
)

/** web_search → WebSearchToolEntry: the name each network entry has in the OpenAPI description. */
const entryName = (t: NetworkToolType) => `${t.replace(/(^|_)([a-z])/g, (_, _u: string, c: string) => c.toUpperCase())}ToolEntry`
const networkEntry = (t: NetworkToolType) => Type.Object({ type: Type.Literal(t) }, { additionalProperties: false, $id: entryName(t) })

const variants: TObject[] = [McpToolEntry, FunctionToolEntry, ...NETWORK_TOOL_TYPES.map(networkEntry)]
for (const v of variants) {
  const type = (v.properties.type as { const: string }).const
  toolEntryFields.set(type, Object.keys(v.properties))
}

type ToolEntryIn = Static<typeof McpToolEntry> | Static<typeof FunctionToolEntry> | { type: NetworkToolType }

/** One tool entry as sent. The discriminator makes a refusal speak of the entry's own type. */
export const ToolEntry = Type.Unsafe<ToolEntryIn>({
  type: 'object',
  oneOf: variants,
  discriminator: { propertyName: 'type' },
  required: ['type'],
  $id: 'ToolEntry',
  description: `A tool entry: mcp, function, or a sandbox network tool (${NETWORK_TOOL_TYPES.join(', ')}).`,
})
export type ToolEntry = ToolEntryIn

/** What a tool configuration means on this deployment, said once for every field that takes one. */
export const TOOLS_MEANING =
  'Omitted: the default set, every network tool this deployment offers (start-up names the ones it does not); an empty array means none. Entries come back as sent: a type the deployment has turned off (WARREN_DISABLED_TOOLS) or cannot run (web_search and image_search without WARREN_SEARCH_URL, the browser tools without Chromium) is kept in the configuration but not offered to the model.'

export const ToolEntries = Type.Array(ToolEntry, { maxItems: 100, description: `Tool entries. ${TOOLS_MEANING}` })

/** A tool entry as returned: the same vocabulary, with credentials withheld and named in `redacted`. */
export const ToolEntryOut = Type.Object(
  {
    type: Type.String(),
    name: Type.Optional(Type.String()),
    url: Type.Optional(Type.String()),
    command: Type.Optional(Type.String()),
    args: Type.Optional(Type.Array(Type.String())),
    allowed_tools: Type.Optional(Type.Array(Type.String())),
    required: Type.Optional(Type.Boolean()),
    redacted: Type.Optional(Type.Array(Type.String(), { description: 'Names of fields whose secret values were withheld.' })),
    description: Type.Optional(Type.String()),
    parameters: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    timeout_seconds: Type.Optional(Type.Integer()),
  },
  { additionalProperties: false, $id: 'ToolEntryOut' },
)
export type ToolEntryOut = Static<typeof ToolEntryOut>
