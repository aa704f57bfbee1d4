import type { Selectable } from 'kysely'
import { jsonText, type Db, type DialectName } from '../db/database.ts'
import type { Tables } from '../db/tables.ts'
import { prepared } from '../db/prepared.ts'
import { pageQuery, type ListParams } from '../http/pagination.ts'
import { fromJson, toJson } from '../shared/json.ts'
import { redactToolEntry, type StoredToolEntry } from '../tools/tool-entries.ts'
import type { ToolEntry } from '../tools/tools.schema.ts'
import { openFunctionCalls } from '../turns/pending-calls.store.ts'
import type { RequiredAction, Session, SessionAgent, SessionEnvironment, SessionPreview, SessionStatus } from './sessions.schema.ts'

/** The stored agent: tools as sent (credentials included, for the runner), or null for the default set. */
export type StoredAgent = Omit<SessionAgent, 'tools'> & { tools: StoredToolEntry[] | null }

/** The stored environment: what the response shows plus what the workspace needs later. */
export type StoredEnvironment = SessionEnvironment & {
  template_id: string | null
  files: { path: string; size_bytes: number; mode: number }[]
  /** The template's setup script as it was when the session was created; run once at first start. */
  setup?: string | null
}

export type SessionRow = Selectable<Tables['sessions']>

export type NewSession = {
  id: string
  orgId: string
  title: string
  source: Session['source']
  createdByToken: string
  metadata: Record<string, string>
  agent: StoredAgent
  environment: StoredEnvironment
  input: string | null
  /** The node that creates it holds its lease from the start (see src/nodes). */
  ownerNode: string | null
  now: number
}

export const NO_PREVIEW: SessionPreview = { url: null, published_url: null, port: null }

export async function insertSession(db: Db, s: NewSession): Promise<SessionRow> {
  const row: SessionRow = {
    id: s.id,
    org_id: s.orgId,
    status: 'idle',
    created_at: s.now,
    updated_at: s.now,
    title: s.title,
    source: s.source,
    created_by_token: s.createdByToken,
    metadata: toJson(s.metadata),
    agent: toJson(s.agent),
    model_credential_id: s.agent.model_credential_id,
    environment: toJson(s.environment),
    preview: toJson(NO_PREVIEW),
    input: s.input,
    deleted_at: null,
    owner_node: s.ownerNode,
    // The creator's holding is the first: a claim by any other node raises it.
    owner_epoch: 0,
  }
  await db.insertInto('sessions').values(row).execute()
  return row
}

const liveSession = prepared((db, orgId: string, id: string) =>
  db.selectFrom('sessions').selectAll().where('id', '=', id).where('org_id', '=', orgId).where('deleted_at', 'is', null),
)

/** A live session of the organization, or null (missing, deleted, or another organization's). */
export async function getSessionRow(db: Db, orgId: string, id: string): Promise<SessionRow | null> {
  return (await liveSession(db, orgId, id))[0] ?? null
}

/** Like getSessionRow, but finds deleted sessions too (their usage stays readable). */
export async function getSessionRowEvenDeleted(db: Db, orgId: string, id: string): Promise<SessionRow | null> {
  return (await db.selectFrom('sessions').selectAll().where('id', '=', id).where('org_id', '=', orgId).executeTakeFirst()) ?? null
}

export async function countLiveSessions(db: Db, orgId: string): Promise<number> {
  const r = await db.selectFrom('sessions').select((eb) => eb.fn.countAll<number>().as('n')).where('org_id', '=', orgId).where('deleted_at', 'is', null).executeTakeFirstOrThrow()
  return Number(r.n)
}

export type SessionFilters = {
  status?: SessionStatus
  source?: string
  createdByToken?: string
  metadata?: [string, string][]
}

export async function listSessionRows(
  db: Db,
  dialect: DialectName,
  orgId: string,
  params: ListParams,
  filters: SessionFilters,
  cursor: SessionRow | undefined,
): Promise<SessionRow[]> {
  let q = db.selectFrom('sessions').selectAll().where('org_id', '=', orgId).where('deleted_at', 'is', null)
  if (filters.status) q = q.where('status', '=', filters.status)
  if (filters.source) q = q.where('source', '=', filters.source)
  if (filters.createdByToken) q = q.where('created_by_token', '=', filters.createdByToken)
  for (const [k, v] of filters.metadata ?? []) q = q.where(jsonText(dialect, 'metadata', k), '=', v)
  return pageQuery(q, params, cursor).execute()
}

export async function updateSessionRow(db: Db, id: string, patch: { title?: string; metadata?: Record<string, string> }, now: number): Promise<void> {
  await db
    .updateTable('sessions')
    .set({
      updated_at: now,
      ...(patch.title !== undefined ? { title: patch.title } : {}),
      ...(patch.metadata !== undefined ? { metadata: toJson(patch.metadata) } : {}),
    })
    .where('id', '=', id)
    .execute()
}

/** The session's agent as kept (tools sealed), for the runner and the tool configuration. */
export const storedAgentOf = (row: SessionRow): StoredAgent => fromJson<StoredAgent>(row.agent, {} as StoredAgent)

/** Replaces the session's tool configuration (sealed entries); the runner reads it at each model step. */
export async function setSessionTools(db: Db, row: SessionRow, tools: StoredToolEntry[], now: number): Promise<void> {
  await db.updateTable('sessions').set({ agent: toJson({ ...storedAgentOf(row), tools }), updated_at: now }).where('id', '=', row.id).execute()
}

/** The status of a session not deleted; null when it is gone. */
export async function liveSessionStatus(db: Db, id: string): Promise<SessionStatus | null> {
  const row = await db.selectFrom('sessions').select('status').where('id', '=', id).where('deleted_at', 'is', null).executeTakeFirst()
  return row ? (row.status as SessionStatus) : null
}

/** Only moveSession calls this: a move is recorded with its signal in the same transaction. */
export async function setSessionStatus(db: Db, id: string, status: SessionStatus, now: number): Promise<void> {
  await db.updateTable('sessions').set({ status, updated_at: now }).where('id', '=', id).execute()
}

export async function markSessionDeleted(db: Db, id: string, now: number): Promise<void> {
  await db.updateTable('sessions').set({ deleted_at: now, updated_at: now }).where('id', '=', id).execute()
}

/**
 * The wire shape. Tools come back in the vocabulary they were sent in, credentials withheld; a
 * session that named none shows the deployment's default set. `required_actions` comes from the
 * open function calls (requiredActionsOf), not from events.
 */
export function toSession(row: SessionRow, defaultTools: ToolEntry[], requiredActions: RequiredAction[] = []): Session {
  const env = fromJson<StoredEnvironment>(row.environment, {} as StoredEnvironment)
  const agent = storedAgentOf(row)
  return {
    object: 'session',
    id: row.id,
    status: row.status as SessionStatus,
    created_at: Number(row.created_at),
    updated_at: Number(row.updated_at),
    agent: { ...agent, tools: (agent.tools ?? defaultTools).map(redactToolEntry) },
    environment: {
      type: 'sandbox',
      state: env.state,
      workspace_directory: env.workspace_directory,
      repo: env.repo,
      profiles: env.profiles,
      template: env.template,
      // Sessions stored before images have no field: the host's system.
      image: env.image ?? null,
    },
    preview: fromJson<SessionPreview>(row.preview, NO_PREVIEW),
    title: row.title,
    source: row.source as Session['source'],
    created_by_token: row.created_by_token,
    required_actions: requiredActions,
    metadata: fromJson(row.metadata, {}),
  }
}

/** A live session by id alone, for the runner, which acts on behalf of the session's own organization. */
export async function getSessionRowById(db: Db, id: string): Promise<SessionRow | null> {
  return (await liveSessionById(db, id))[0] ?? null
}
const liveSessionById = prepared((db, id: string) => db.selectFrom('sessions').selectAll().where('id', '=', id).where('deleted_at', 'is', null))

/** The wire shapes of these sessions, each with its own `required_actions` (one query for all). */
export async function toSessions(db: Db, rows: SessionRow[], defaultTools: ToolEntry[]): Promise<Session[]> {
  // Open function calls exist exactly while a session is requires_action (both move in one
  // transaction), so the others need no query: a read of a quiet session stays one lookup.
  const waiting = rows.filter((r) => r.status === 'requires_action').map((r) => r.id)
  const actions = await requiredActionsOf(db, waiting)
  return rows.map((r) => toSession(r, defaultTools, actions.get(r.id) ?? []))
}

/** The sessions' open function calls, each session's in the order they were made. */
export async function requiredActionsOf(db: Db, sessionIds: string[]): Promise<Map<string, RequiredAction[]>> {
  const bySession = new Map<string, RequiredAction[]>()
  for (const c of await openFunctionCalls(db, sessionIds)) {
    const list = bySession.get(c.sessionId) ?? []
    list.push({ type: 'function_call', turn_id: c.turnId, call_id: c.callId, name: c.name, arguments: c.args, created_at: c.createdAt, expires_at: c.expiresAt ?? c.createdAt })
    bySession.set(c.sessionId, list)
  }
  return bySession
}

/** True when the session is gone (deleted, or never stored). */
export async function isSessionDeleted(db: Db, id: string): Promise<boolean> {
  const row = await db.selectFrom('sessions').select('deleted_at').where('id', '=', id).executeTakeFirst()
  return !row || row.deleted_at !== null
}
