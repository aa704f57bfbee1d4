import type { Store } from '../db/database.ts'
import { lockKey } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { decodeFiles } from '../files/decode-files.ts'
import { putSeedFiles } from '../files/seed-files.store.ts'
import { newId } from '../shared/ids.ts'
import { checkImageRef } from '../shared/image-ref.ts'
import { toJson } from '../shared/json.ts'
import { TEMPLATES_PER_ORG, type CreateTemplateBody } from './environments.schema.ts'
import { countTemplates, getTemplateRowByName, resolveProfiles, saveTemplateRow, type TemplateRow } from './environments.store.ts'

/**
 * Creates a template, or replaces the one of the same name whole (id and created_at kept). Files
 * are decoded and checked before anything is written, and the row and its files are written in
 * one transaction: a refused request leaves the previous template as it was.
 */
export async function putTemplate(store: Store, orgId: string, body: CreateTemplateBody): Promise<{ row: TemplateRow; created: boolean }> {
  if (body.repo && body.repo.full_name.split('/').some((part) => part === '.' || part === '..')) {
    throw new ApiError('invalid_request', `repo.full_name "${body.repo.full_name}" must be owner/name.`)
  }
  const files = decodeFiles(body.files ?? [], 'files')
  const image = body.image === undefined ? null : checkImageRef(body.image, 'image')
  return store.db.transaction().execute(async (trx) => {
    // Serializes the organization's template writes so that the count and the name check hold.
    await lockKey(trx, store.dialect, `environment-templates:${orgId}`)
    const profiles = await resolveProfiles(trx, orgId, body.profiles ?? [])
    const existing = await getTemplateRowByName(trx, orgId, body.name)
    if (!existing && (await countTemplates(trx, orgId)) >= TEMPLATES_PER_ORG) {
      throw new ApiError(
        'invalid_request',
        `An organization holds at most ${TEMPLATES_PER_ORG} environment templates; delete one, or post an existing name to replace it.`,
      )
    }
    const now = Date.now()
    const row: TemplateRow = {
      id: existing?.id ?? newId('envt'),
      org_id: orgId,
      name: body.name,
      files: toJson(files.map((f) => ({ path: f.path, size_bytes: f.content.length, mode: f.mode }))),
      repo: body.repo ? toJson(body.repo.branch === undefined ? { full_name: body.repo.full_name } : body.repo) : null,
      setup: body.setup ?? null,
      profiles: toJson(profiles.map((p) => p.id)),
      image,
      created_at: existing ? Number(existing.created_at) : now,
      updated_at: now,
    }
    await saveTemplateRow(trx, row, existing !== null)
    await putSeedFiles(trx, row.id, files)
    return { row, created: existing === null }
  })
}
