import type { Db } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { getAgent } from '../agents/agents.store.ts'
import { findCredentialForModel, getCredential, getDefaultCredential, type CredentialRecord } from '../models/models.store.ts'
import { newId } from '../shared/ids.ts'
import { sealToolEntries } from '../tools/tool-entries.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import type { ToolEntry } from '../tools/tools.schema.ts'
import type { AgentInput } from './sessions.schema.ts'
import type { StoredAgent } from './sessions.store.ts'

/**
 * Decides what runs a new session: a stored agent (when `agent.id` is given) overridden by the
 * other agent fields, on a model connection of the organization. Every refusal names what it
 * could not find, and nothing is written here.
 */
export async function resolveAgent(db: Db, box: SecretBox, orgId: string, input: AgentInput | undefined, topTools: ToolEntry[] | undefined): Promise<StoredAgent> {
  const a = input ?? {}
  if (a.tools !== undefined && topTools !== undefined) {
    throw new ApiError('invalid_request', 'Give tools either in "agent.tools" or in the top-level "tools", not both.')
  }
  const stored = a.id !== undefined ? await getAgent(db, orgId, a.id) : null
  if (a.id !== undefined && !stored) throw new ApiError('invalid_request', `No stored agent with id "${a.id}" in this organization (agent.id).`)

  const given = a.tools ?? topTools
  // A stored agent's tools are kept sealed already; given ones are sealed here.
  const tools = given ? sealToolEntries(box, given, a.tools ? 'agent.tools' : 'tools') : (stored?.tools ?? null)

  const credentialId = a.model_credential_id ?? (a.model === undefined ? stored?.model_credential_id : undefined)
  const model = a.model ?? stored?.model
  let credential: CredentialRecord | null
  if (credentialId !== undefined) {
    credential = await getCredential(db, orgId, credentialId)
    if (!credential) throw new ApiError('invalid_request', `Model connection "${credentialId}" is not one of this organization's (agent.model_credential_id).`)
    if (model !== undefined && credential.models.length > 0 && !credential.models.includes(model)) {
      throw new ApiError('invalid_request', `Model "${model}" is not connected on model connection "${credential.id}".`)
    }
  } else if (model !== undefined) {
    credential = await findCredentialForModel(db, orgId, model)
    if (!credential) throw new ApiError('invalid_request', `Model "${model}" is not connected for this organization; connect it with POST /v1/model-credentials.`)
  } else {
    credential = await getDefaultCredential(db, orgId)
    if (!credential) throw new ApiError('invalid_request', 'This organization has no model connection to run the session on; connect one with POST /v1/model-credentials.')
  }
  const chosenModel = model ?? credential.models[0]
  if (chosenModel === undefined) throw new ApiError('invalid_request', `Model connection "${credential.id}" lists no model; name one in agent.model.`)

  return {
    id: stored?.id ?? newId('agt'),
    model: chosenModel,
    model_credential_id: credential.id,
    approval_mode: a.approval_mode ?? 'auto',
    instructions: a.instructions ?? stored?.instructions ?? '',
    permission_rules: a.permission_rules ?? [],
    tools,
  }
}
