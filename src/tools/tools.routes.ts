import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import type { Deps } from '../deps.ts'
import { errorResponses } from '../errors.ts'
import { requireSession } from '../sessions/require-session.ts'
import { SessionParams } from '../sessions/sessions.schema.ts'
import { storedAgentOf } from '../sessions/sessions.store.ts'
import { defaultToolEntries } from './default-tools.ts'
import { putSessionTools } from './put-session-tools.ts'
import { redactToolEntry } from './tool-entries.ts'
import { TOOLS_MEANING, ToolEntry, ToolEntryOut } from './tools.schema.ts'

const SessionTools = Type.Object(
  {
    object: Type.Literal('session.tools'),
    tools: Type.Array(ToolEntryOut, { description: 'As sent; credentials of MCP servers withheld and named in each entry’s `redacted`. Without a configuration of its own, the default set: the network tools this deployment offers.' }),
  },
  { $id: 'SessionTools', additionalProperties: false },
)
const PutToolsBody = Type.Object(
  { tools: Type.Array(ToolEntry, { maxItems: 100, description: `Replaces the whole configuration. Naming network tool types narrows the session to exactly those. ${TOOLS_MEANING}` }) },
  { $id: 'PutSessionToolsRequest', additionalProperties: false },
)

export const toolRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, deps) => {
  const { store, config } = deps
  app.get(
    '/sessions/:session_id/tools',
    {
      config: { scope: 'sessions:read', onOwnersNode: false },
      schema: { operationId: 'getSessionTools', tags: ['tools'], summary: "The session's tool configuration", params: SessionParams, response: { 200: SessionTools, ...errorResponses(404) } },
    },
    async (req) => {
      const row = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      const tools = storedAgentOf(row).tools ?? defaultToolEntries(config)
      return { object: 'session.tools' as const, tools: tools.map(redactToolEntry) }
    },
  )

  app.put(
    '/sessions/:session_id/tools',
    {
      config: { scope: 'sessions:write', onOwnersNode: false, idempotent: true },
      schema: {
        operationId: 'putSessionTools',
        tags: ['tools'],
        summary: "Replace the session's tool configuration; a running turn uses it from its next model step",
        params: SessionParams,
        body: PutToolsBody,
        response: { 200: SessionTools, ...errorResponses(400, 404) },
      },
    },
    async (req) => {
      const shown = await putSessionTools(deps, req.auth.orgId, req.params.session_id, req.body.tools)
      return { object: 'session.tools' as const, tools: shown }
    },
  )
}
