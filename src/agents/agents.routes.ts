import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import type { Config } from '../config.ts'
import type { Deps } from '../deps.ts'
import { errorResponses, notFound } from '../errors.ts'
import { ListEnvelope, PlainListQuery, listPage } from '../http/pagination.ts'
import { newId } from '../shared/ids.ts'
import { defaultToolEntries } from '../tools/default-tools.ts'
import { redactToolEntry, sealToolEntries } from '../tools/tool-entries.ts'
import { Agent, AgentDeleted, AgentParams, CreateAgentBody, UpdateAgentBody } from './agents.schema.ts'
import { deleteAgent, getAgent, insertAgent, listAgentRows, toAgentRecord, updateAgent, type AgentRecord } from './agents.store.ts'
import { chooseCredential } from './choose-credential.ts'

/** An agent without tools shows the set its sessions would get, as a session does. */
export const toAgentShape = (a: AgentRecord, config: Pick<Config, 'disabledTools' | 'searchUrl'>): Agent => ({
  object: 'agent',
  id: a.id,
  name: a.name,
  model: a.model,
  model_credential_id: a.model_credential_id,
  instructions: a.instructions,
  tools: (a.tools ?? defaultToolEntries(config)).map(redactToolEntry),
  text: a.text,
  created_at: a.created_at,
})

const tags = ['agents']

export const agentRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { store, config, box }) => {
  const db = store.db

  app.post(
    '/agents',
    {
      config: { scope: 'agents:write', idempotent: true },
      schema: { operationId: 'createAgent', tags, summary: 'Store an agent that sessions can start from', body: CreateAgentBody, response: { 201: Agent, ...errorResponses(400) } },
    },
    async (req, reply) => {
      const b = req.body
      const tools = b.tools ? sealToolEntries(box, b.tools, 'tools') : null
      const now = Date.now()
      const agent = await insertAgent(db, {
        id: newId('agt'),
        org_id: req.auth.orgId,
        name: b.name,
        model: b.model,
        model_credential_id: await chooseCredential(db, req.auth.orgId, b.model, b.model_credential_id),
        instructions: b.instructions ?? '',
        tools,
        text: b.text ?? {},
        created_at: now,
        updated_at: now,
      })
      return reply.code(201).send(toAgentShape(agent, config))
    },
  )

  app.get(
    '/agents',
    {
      config: { scope: 'agents:read' },
      schema: {
        operationId: 'listAgents',
        tags,
        summary: 'List stored agents, newest first',
        querystring: Type.Object(PlainListQuery, { additionalProperties: false }),
        response: { 200: ListEnvelope(Agent), ...errorResponses(400) },
      },
    },
    async (req) => {
      return listPage(listAgentRows(db, req.auth.orgId), req.query, (rows) => rows.map((r) => toAgentShape(toAgentRecord(r), config)))
    },
  )

  app.get(
    '/agents/:agent_id',
    { config: { scope: 'agents:read' }, schema: { operationId: 'getAgent', summary: 'Read one stored agent', tags, params: AgentParams, response: { 200: Agent, ...errorResponses(404) } } },
    async (req) => {
      const agent = await getAgent(db, req.auth.orgId, req.params.agent_id)
      if (!agent) throw notFound('agent', req.params.agent_id)
      return toAgentShape(agent, config)
    },
  )

  app.post(
    '/agents/:agent_id',
    {
      config: { scope: 'agents:write', idempotent: true },
      schema: {
        operationId: 'updateAgent',
        tags,
        summary: 'Change a stored agent; only the fields given change',
        params: AgentParams,
        body: UpdateAgentBody,
        response: { 200: Agent, ...errorResponses(400, 404) },
      },
    },
    async (req) => {
      const b = req.body
      const current = await getAgent(db, req.auth.orgId, req.params.agent_id)
      if (!current) throw notFound('agent', req.params.agent_id)
      const tools = b.tools ? sealToolEntries(box, b.tools, 'tools', current.tools) : current.tools
      const model = b.model ?? current.model
      // The connection is only re-decided when the model or the connection changes, so renaming an
      // agent never fails over a connection problem it did not ask about.
      const credentialId =
        b.model !== undefined || b.model_credential_id !== undefined
          ? await chooseCredential(db, req.auth.orgId, model, b.model_credential_id, current.model_credential_id)
          : current.model_credential_id
      const next: AgentRecord = {
        ...current,
        name: b.name ?? current.name,
        model,
        model_credential_id: credentialId,
        instructions: b.instructions ?? current.instructions,
        tools,
        text: b.text ?? current.text,
        updated_at: Date.now(),
      }
      return toAgentShape(await updateAgent(db, next), config)
    },
  )

  app.delete(
    '/agents/:agent_id',
    {
      config: { scope: 'agents:write', idempotent: true },
      schema: { operationId: 'deleteAgent', summary: 'Delete a stored agent', tags, params: AgentParams, response: { 200: AgentDeleted, ...errorResponses(400, 404) } },
    },
    async (req) => {
      if (!(await deleteAgent(db, req.auth.orgId, req.params.agent_id))) throw notFound('agent', req.params.agent_id)
      return { object: 'agent.deleted' as const, id: req.params.agent_id, deleted: true }
    },
  )
}
