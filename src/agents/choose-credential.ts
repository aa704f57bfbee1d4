import type { Db } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { findCredentialForModel, getCredential } from '../models/models.store.ts'

/**
 * Decides which model connection an agent runs `model` on: the one named, which must belong to
 * the organization and list the model; else `current` if it still lists the model; else the
 * default connection when it lists it, or the oldest that does.
 */
export async function chooseCredential(db: Db, orgId: string, model: string, named: string | undefined, current?: string): Promise<string> {
  if (named !== undefined) {
    const c = await getCredential(db, orgId, named)
    if (!c) throw new ApiError('invalid_request', `Model connection "${named}" is not one of this organization's (model_credential_id).`)
    // A connection listing no models runs whatever it is asked (the sessions domain reads it the same way).
    if (c.models.length > 0 && !c.models.includes(model)) {
      throw new ApiError('invalid_request', `Model "${model}" is not connected on model connection "${named}"; it lists ${c.models.slice(0, 10).join(', ')}${c.models.length > 10 ? ', …' : ''}.`)
    }
    return c.id
  }
  if (current !== undefined) {
    const c = await getCredential(db, orgId, current)
    if (c && (c.models.length === 0 || c.models.includes(model))) return c.id
  }
  const found = await findCredentialForModel(db, orgId, model)
  if (!found) {
    throw new ApiError('invalid_request', `Model "${model}" is not connected for this organization; connect it with POST /v1/model-credentials or name a model_credential_id.`)
  }
  return found.id
}
