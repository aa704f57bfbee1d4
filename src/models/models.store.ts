import { createHash } from 'node:crypto'
import type { Db } from '../db/database.ts'
import { prepared } from '../db/prepared.ts'
import type { Tables } from '../db/tables.ts'
import { fromJson, toJson } from '../shared/json.ts'

/** A model connection as the rest of the service sees it: never the key. */
export type CredentialRecord = {
  id: string
  orgId: string
  provider: string
  baseUrl: string
  name: string
  models: string[]
  isDefault: boolean
  createdAt: number
}

/** What the connection's own routes show: the record and the key's hint. */
export type CredentialView = CredentialRecord & { keyHint: string }

type CredentialRow = Tables['model_credentials']

const orgRows = (db: Db, orgId: string) => db.selectFrom('model_credentials').selectAll().where('org_id', '=', orgId)

export const toCredential = (r: CredentialRow): CredentialRecord => ({
  id: r.id,
  orgId: r.org_id,
  provider: r.provider,
  baseUrl: r.base_url,
  name: r.name,
  models: fromJson(r.models, []),
  isDefault: Number(r.is_default) === 1,
  createdAt: Number(r.created_at),
})

export const toCredentialView = (r: CredentialRow): CredentialView => ({ ...toCredential(r), keyHint: r.key_hint })

export async function getCredentialView(db: Db, orgId: string, id: string): Promise<CredentialView | null> {
  const row = await orgRows(db, orgId).where('id', '=', id).executeTakeFirst()
  return row ? toCredentialView(row) : null
}

/** Identifies a key without keeping it readable, so the same key connected twice is recognised. */
export const keyFingerprint = (apiKey: string): string => createHash('sha256').update(apiKey).digest('hex')

/**
 * The key's conventional prefix (`sk-`, `sk-ant-`) and its last four characters, enough to tell keys
 * apart. Short keys show less, so that the hint never gives away a meaningful share of the key.
 */
export function keyHint(apiKey: string): string {
  const prefix = apiKey.length >= 20 ? (/^[a-z]{2,3}-(?:[a-z]{3,4}-)?/.exec(apiKey)?.[0] ?? '') : ''
  return `${prefix}…${apiKey.length >= 12 ? apiKey.slice(-4) : ''}`
}

export async function getCredential(db: Db, orgId: string, id: string): Promise<CredentialRecord | null> {
  const row = await orgRows(db, orgId).where('id', '=', id).executeTakeFirst()
  return row ? toCredential(row) : null
}

export async function getDefaultCredential(db: Db, orgId: string): Promise<CredentialRecord | null> {
  const row = await orgRows(db, orgId).where('is_default', '=', 1).orderBy('created_at').orderBy('id').executeTakeFirst()
  return row ? toCredential(row) : null
}

/** The default connection when it lists the model, else the oldest connection that does, else null. */
export async function findCredentialForModel(db: Db, orgId: string, model: string): Promise<CredentialRecord | null> {
  // At most 25 rows an organization, and `models` is JSON text: filtering here is simpler than per-dialect SQL.
  const all = (await orgRows(db, orgId).orderBy('created_at').orderBy('id').execute()).map(toCredential)
  const listing = all.filter((c) => c.models.includes(model))
  return listing.find((c) => c.isDefault) ?? listing[0] ?? null
}

/**
 * The connection with its key as stored (sealed): one read for a caller that keeps the opened key
 * and opens it again only when the sealed text changed (ModelConnections).
 */
export async function getSealedCredential(db: Db, orgId: string, id: string): Promise<{ credential: CredentialRecord; sealedKey: string } | null> {
  const [row] = await credentialOf(db, orgId, id)
  return row ? { credential: toCredential(row), sealedKey: row.api_key_enc } : null
}

const credentialOf = prepared((db, orgId: string, id: string) => orgRows(db, orgId).where('id', '=', id))

/** The connection already made with this provider, address and key, if any. */
export async function findConnected(db: Db, orgId: string, provider: string, baseUrl: string, fingerprint: string): Promise<CredentialView | null> {
  const row = await orgRows(db, orgId)
    .where('provider', '=', provider)
    .where('base_url', '=', baseUrl)
    .where('key_fingerprint', '=', fingerprint)
    .executeTakeFirst()
  return row ? toCredentialView(row) : null
}

export async function countCredentials(db: Db, orgId: string): Promise<number> {
  const row = await db.selectFrom('model_credentials').select((eb) => eb.fn.countAll<number>().as('n')).where('org_id', '=', orgId).executeTakeFirstOrThrow()
  return Number(row.n)
}

/** The creation time of the organization's newest connection, 0 when it has none. */
export async function newestCreatedAt(db: Db, orgId: string): Promise<number> {
  const row = await db.selectFrom('model_credentials').select((eb) => eb.fn.max('created_at').as('t')).where('org_id', '=', orgId).executeTakeFirst()
  return Number(row?.t ?? 0)
}

export async function insertCredential(db: Db, row: CredentialRow): Promise<CredentialView> {
  await db.insertInto('model_credentials').values(row).execute()
  return toCredentialView(row)
}

/** Makes one connection the organization's only default. */
export async function setDefaultCredential(db: Db, orgId: string, id: string): Promise<void> {
  await db.updateTable('model_credentials').set({ is_default: 0 }).where('org_id', '=', orgId).where('id', '!=', id).where('is_default', '=', 1).execute()
  await db.updateTable('model_credentials').set({ is_default: 1 }).where('org_id', '=', orgId).where('id', '=', id).execute()
}

export async function clearDefaultCredential(db: Db, orgId: string): Promise<void> {
  await db.updateTable('model_credentials').set({ is_default: 0 }).where('org_id', '=', orgId).where('is_default', '=', 1).execute()
}

export async function oldestCredential(db: Db, orgId: string): Promise<CredentialRecord | null> {
  const row = await orgRows(db, orgId).orderBy('created_at').orderBy('id').executeTakeFirst()
  return row ? toCredential(row) : null
}

export async function deleteCredentialRow(db: Db, orgId: string, id: string): Promise<void> {
  await db.deleteFrom('model_credentials').where('org_id', '=', orgId).where('id', '=', id).execute()
}

export function listCredentialRows(db: Db, orgId: string) {
  return orgRows(db, orgId)
}

/**
 * Points the organization's live sessions that run on `fromId` at `toId` (or at none), in both the
 * column and the copy inside the session's `agent` JSON, which is what the Session shows. Lives
 * here because it is part of deleting a connection; it is the only write to sessions from this domain.
 */
export async function moveSessionsOffCredential(db: Db, orgId: string, fromId: string, toId: string | null, now: number): Promise<number> {
  const rows = await db
    .selectFrom('sessions')
    .select(['id', 'agent'])
    .where('org_id', '=', orgId)
    .where('model_credential_id', '=', fromId)
    .where('deleted_at', 'is', null)
    .execute()
  for (const r of rows) {
    const agent = { ...fromJson<Record<string, unknown>>(r.agent, {}), model_credential_id: toId }
    await db.updateTable('sessions').set({ model_credential_id: toId, agent: toJson(agent), updated_at: now }).where('id', '=', r.id).execute()
  }
  return rows.length
}
