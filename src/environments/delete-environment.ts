import type { Store } from '../db/database.ts'
import { notFound } from '../errors.ts'
import { deleteSeedFiles } from '../files/seed-files.store.ts'
import { deleteProfileRow, dropProfileFromTemplates, getProfileRow, deleteTemplateRow, getTemplateRow } from './environments.store.ts'

/** Deletes a profile and takes it out of the templates that named it, so they stay usable. */
export async function deleteProfile(store: Store, orgId: string, id: string): Promise<void> {
  await store.db.transaction().execute(async (trx) => {
    const row = await getProfileRow(trx, orgId, id)
    if (!row) throw notFound('environment profile', id)
    await deleteProfileRow(trx, row.id)
    await dropProfileFromTemplates(trx, orgId, row.id, Date.now())
  })
}

/** Deletes a template with its stored files; sessions started from it hold their own copies. */
export async function deleteTemplate(store: Store, orgId: string, id: string): Promise<void> {
  await store.db.transaction().execute(async (trx) => {
    const row = await getTemplateRow(trx, orgId, id)
    if (!row) throw notFound('environment template', id)
    await deleteSeedFiles(trx, row.id)
    await deleteTemplateRow(trx, row.id)
  })
}
