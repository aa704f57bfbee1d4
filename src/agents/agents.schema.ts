import { Type, type Static } from 'typebox'
import { TOOLS_MEANING, ToolEntry, ToolEntryOut } from '../tools/tools.schema.ts'

const Name = Type.String({ minLength: 1, maxLength: 200 })
const Model = Type.String({ minLength: 1, maxLength: 200, description: 'Must be listed by a model connection of the organization.' })
const CredentialId = Type.String({
  description: 'One of the organization’s model connections. Omitted: the default connection when it lists the model, else the oldest that does.',
})
const Instructions = Type.String({ maxLength: 100_000, description: 'Standing instructions applied to every turn.' })
const Text = Type.Record(Type.String(), Type.Unknown(), { description: 'Output text settings, kept as given.' })
const Tools = Type.Array(ToolEntry, { maxItems: 100, description: `Tool entries of the sessions started from this agent. ${TOOLS_MEANING}` })

export const Agent = Type.Object(
  {
    object: Type.Literal('agent'),
    id: Type.String(),
    name: Type.String(),
    model: Type.String(),
    model_credential_id: Type.String(),
    instructions: Type.String(),
    tools: Type.Array(ToolEntryOut, { description: 'Credentials of MCP servers are withheld and named in each entry’s `redacted`.' }),
    text: Text,
    created_at: Type.Integer({ description: 'Unix ms' }),
  },
  { $id: 'Agent', additionalProperties: false },
)
export type Agent = Static<typeof Agent>

export const CreateAgentBody = Type.Object(
  {
    name: Name,
    model: Model,
    model_credential_id: Type.Optional(CredentialId),
    instructions: Type.Optional(Instructions),
    tools: Type.Optional(Tools),
    text: Type.Optional(Text),
  },
  { $id: 'CreateAgentRequest', additionalProperties: false },
)
export type CreateAgentBody = Static<typeof CreateAgentBody>

export const UpdateAgentBody = Type.Object(
  {
    name: Type.Optional(Name),
    model: Type.Optional(Model),
    model_credential_id: Type.Optional(CredentialId),
    instructions: Type.Optional(Instructions),
    tools: Type.Optional(Tools),
    text: Type.Optional(Text),
  },
  { $id: 'UpdateAgentRequest', additionalProperties: false, description: 'Only the fields given change; tools and text are replaced whole.' },
)
export type UpdateAgentBody = Static<typeof UpdateAgentBody>

export const AgentParams = Type.Object({ agent_id: Type.String() }, { additionalProperties: false })

export const AgentDeleted = Type.Object(
  { object: Type.Literal('agent.deleted'), id: Type.String(), deleted: Type.Boolean() },
  { $id: 'AgentDeleted', additionalProperties: false },
)
