import type { Selectable } from 'kysely'
import type { Db } from '../db/database.ts'
import type { Tables } from '../db/tables.ts'
import { ApiError } from '../errors.ts'
import { newId } from '../shared/ids.ts'
import { fromJson, toJson } from '../shared/json.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import type { Profile, Template, TemplateFile, TemplateRepo } from './environments.schema.ts'

export type ProfileRow = Selectable<Tables['environment_profiles']>
export type TemplateRow = Selectable<Tables['environment_templates']>

/** A template as the sessions domain reads it. */
export type TemplateRecord = {
  id: string
  name: string
  files: { path: string; size_bytes: number; mode: number }[]
  repo: { full_name: string; branch?: string } | null
  setup: string | null
  profiles: string[]
  image: string | null
}

export const toProfile = (r: ProfileRow): Profile => ({
  object: 'environment.profile',
  id: r.id,
  name: r.name,
  keys: fromJson<string[]>(r.keys, []),
  created_at: Number(r.created_at),
})

/** Stores a profile with its values sealed; null when the organization already has one of that name. */
export async function insertProfile(db: Db, box: SecretBox, orgId: string, name: string, env: Record<string, string>): Promise<ProfileRow | null> {
  const row: ProfileRow = {
    id: newId('envp'),
    org_id: orgId,
    name,
    keys: toJson(Object.keys(env).sort()),
    env_enc: box.seal(toJson(env)),
    created_at: Date.now(),
  }
  const inserted = await db
    .insertInto('environment_profiles')
    .values(row)
    .onConflict((oc) => oc.columns(['org_id', 'name']).doNothing())
    .returning('id')
    .executeTakeFirst()
  return inserted ? row : null
}

export async function getProfileRow(db: Db, orgId: string, id: string): Promise<ProfileRow | null> {
  return (await db.selectFrom('environment_profiles').selectAll().where('org_id', '=', orgId).where('id', '=', id).executeTakeFirst()) ?? null
}

export async function getProfileByName(db: Db, orgId: string, name: string): Promise<ProfileRow | null> {
  return (await db.selectFrom('environment_profiles').selectAll().where('org_id', '=', orgId).where('name', '=', name).executeTakeFirst()) ?? null
}

export function listProfileRows(db: Db, orgId: string) {
  return db.selectFrom('environment_profiles').selectAll().where('org_id', '=', orgId)
}

export async function deleteProfileRow(db: Db, id: string): Promise<void> {
  await db.deleteFrom('environment_profiles').where('id', '=', id).execute()
}

/**
 * Resolves profile references (an id, else a name) of the organization, in order and without
 * repeats. Throws invalid_request naming the first reference that matches nothing.
 */
export async function resolveProfiles(db: Db, orgId: string, refs: string[]): Promise<{ id: string; name: string }[]> {
  if (refs.length === 0) return []
  const rows = await db
    .selectFrom('environment_profiles')
    .select(['id', 'name'])
    .where('org_id', '=', orgId)
    .where((eb) => eb.or([eb('id', 'in', refs), eb('name', 'in', refs)]))
    .execute()
  const out = new Map<string, { id: string; name: string }>()
  for (const ref of refs) {
    const found = rows.find((r) => r.id === ref) ?? rows.find((r) => r.name === ref)
    if (!found) throw new ApiError('invalid_request', `No environment profile with id or name "${ref}" in this organization.`)
    out.set(found.id, { id: found.id, name: found.name })
  }
  return [...out.values()]
}

/**
 * The variables of the given profiles, merged in the order given (a later profile wins a key).
 * A profile deleted since it was named is skipped.
 */
export async function getProfileEnv(db: Db, box: SecretBox, orgId: string, ids: string[]): Promise<Record<string, string>> {
  if (ids.length === 0) return {}
  const rows = await db.selectFrom('environment_profiles').select(['id', 'env_enc']).where('org_id', '=', orgId).where('id', 'in', ids).execute()
  // A Map, then fromEntries: a key such as __proto__ stays an ordinary variable.
  const env = new Map<string, string>()
  for (const id of ids) {
    const row = rows.find((r) => r.id === id)
    if (!row) continue
    for (const [k, v] of Object.entries(fromJson<Record<string, string>>(box.open(row.env_enc), {}))) env.set(k, v)
  }
  return Object.fromEntries(env)
}

export function toTemplate(r: TemplateRow): Template {
  return {
    object: 'environment.template',
    id: r.id,
    name: r.name,
    files: fromJson<TemplateFile[]>(r.files, []),
    repo: fromJson<TemplateRepo | null>(r.repo, null),
    setup: r.setup,
    profiles: fromJson<string[]>(r.profiles, []),
    image: r.image ?? null,
    created_at: Number(r.created_at),
    updated_at: Number(r.updated_at),
  }
}

export async function getTemplateRow(db: Db, orgId: string, id: string): Promise<TemplateRow | null> {
  return (await db.selectFrom('environment_templates').selectAll().where('org_id', '=', orgId).where('id', '=', id).executeTakeFirst()) ?? null
}

export async function getTemplateRowByName(db: Db, orgId: string, name: string): Promise<TemplateRow | null> {
  return (await db.selectFrom('environment_templates').selectAll().where('org_id', '=', orgId).where('name', '=', name).executeTakeFirst()) ?? null
}

export async function getTemplateByName(db: Db, orgId: string, name: string): Promise<TemplateRecord | null> {
  const row = await getTemplateRowByName(db, orgId, name)
  if (!row) return null
  const { id, files, repo, setup, profiles, image } = toTemplate(row)
  return { id, name: row.name, files, repo, setup, profiles, image }
}

export function listTemplateRows(db: Db, orgId: string) {
  return db.selectFrom('environment_templates').selectAll().where('org_id', '=', orgId)
}

export async function countTemplates(db: Db, orgId: string): Promise<number> {
  const r = await db.selectFrom('environment_templates').select((eb) => eb.fn.countAll<number>().as('n')).where('org_id', '=', orgId).executeTakeFirstOrThrow()
  return Number(r.n)
}

/** Inserts the row, or overwrites the row with the same id. */
export async function saveTemplateRow(db: Db, row: TemplateRow, exists: boolean): Promise<void> {
  if (!exists) {
    await db.insertInto('environment_templates').values(row).execute()
    return
  }
  const { id, org_id: _org, created_at: _created, ...fields } = row
  await db.updateTable('environment_templates').set(fields).where('id', '=', id).execute()
}

export async function deleteTemplateRow(db: Db, id: string): Promise<void> {
  await db.deleteFrom('environment_templates').where('id', '=', id).execute()
}

/** Takes a deleted profile out of every template of the organization that named it. */
export async function dropProfileFromTemplates(db: Db, orgId: string, profileId: string, now: number): Promise<void> {
  const rows = await db.selectFrom('environment_templates').select(['id', 'profiles']).where('org_id', '=', orgId).execute()
  for (const r of rows) {
    const ids = fromJson<string[]>(r.profiles, [])
    if (ids.includes(profileId)) {
      await db.updateTable('environment_templates').set({ profiles: toJson(ids.filter((p) => p !== profileId)), updated_at: now }).where('id', '=', r.id).execute()
    }
  }
}
