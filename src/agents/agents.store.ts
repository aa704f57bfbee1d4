import type { Db } from '../db/database.ts'
import type { Tables } from '../db/tables.ts'
import { fromJson, toJson } from '../shared/json.ts'
import type { StoredToolEntry } from '../tools/tool-entries.ts'

/**
 * A stored agent as kept: tools as sent with MCP credentials sealed (sessions copy them), or null
 * when none were given, which means the default set. Field names follow the wire shape.
 */
export type AgentRecord = {
  id: string
  org_id: string
  name: string
  model: string
  model_credential_id: string
  instructions: string
  tools: StoredToolEntry[] | null
  text: Record<string, unknown>
  created_at: number
  updated_at: number
}

type AgentRow = Tables['agents']

export const toAgentRecord = (r: AgentRow): AgentRecord => ({
  id: r.id,
  org_id: r.org_id,
  name: r.name,
  model: r.model,
  model_credential_id: r.model_credential_id,
  instructions: r.instructions,
  tools: fromJson<StoredToolEntry[] | null>(r.tools, null),
  text: fromJson(r.text, {}),
  created_at: Number(r.created_at),
  updated_at: Number(r.updated_at),
})

const toRow = (a: AgentRecord): AgentRow => ({ ...a, tools: toJson(a.tools), text: toJson(a.text) })

/** The organization's stored agent, tools unredacted, or null (missing or another organization's). */
export async function getAgent(db: Db, orgId: string, id: string): Promise<AgentRecord | null> {
  const row = await db.selectFrom('agents').selectAll().where('org_id', '=', orgId).where('id', '=', id).executeTakeFirst()
  return row ? toAgentRecord(row) : null
}

export async function insertAgent(db: Db, agent: AgentRecord): Promise<AgentRecord> {
  await db.insertInto('agents').values(toRow(agent)).execute()
  return agent
}

/** Writes every field of the record except its identity and creation time. */
export async function updateAgent(db: Db, agent: AgentRecord): Promise<AgentRecord> {
  const { id, org_id, created_at, ...rest } = toRow(agent)
  await db.updateTable('agents').set(rest).where('org_id', '=', org_id).where('id', '=', id).execute()
  return agent
}

/** True when the agent existed in the organization. */
export async function deleteAgent(db: Db, orgId: string, id: string): Promise<boolean> {
  const r = await db.deleteFrom('agents').where('org_id', '=', orgId).where('id', '=', id).executeTakeFirst()
  return Number(r.numDeletedRows) > 0
}

export function listAgentRows(db: Db, orgId: string) {
  return db.selectFrom('agents').selectAll().where('org_id', '=', orgId)
}

/** Re-points the organization's agents from a removed model connection to its successor. */
export async function moveAgentsOffCredential(db: Db, orgId: string, fromId: string, toId: string): Promise<void> {
  await db
    .updateTable('agents')
    .set({ model_credential_id: toId, updated_at: Date.now() })
    .where('org_id', '=', orgId)
    .where('model_credential_id', '=', fromId)
    .execute()
}
