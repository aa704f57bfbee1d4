import type { LanguageModel } from 'ai'
import type { Db } from '../db/database.ts'
import { getSealedCredential, type CredentialRecord } from '../models/models.store.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import { languageModel } from './language-model.ts'
import type { ProviderFetch } from './provider-fetch.ts'

export type ModelConnection = { credential: CredentialRecord; key: string; model: LanguageModel }

/**
 * A session driver's model connections. Every step reads the connection's row, so a connection
 * deleted meanwhile fails the next step as before; what is kept between steps is only what the
 * row would give again: the key opened from the same sealed text, and the SDK's model built from
 * the same connection, key and model name. A sealed text that changed (the service's master key
 * rotated) is opened again.
 */
export class ModelConnections {
  private readonly db: Db
  private readonly box: SecretBox
  private readonly fetch: ProviderFetch
  private readonly opened = new Map<string, { sealedKey: string; key: string; models: Map<string, LanguageModel> }>()

  constructor(db: Db, box: SecretBox, fetch: ProviderFetch) {
    this.db = db
    this.box = box
    this.fetch = fetch
  }

  /** The connection `id` of the organization, with its key and the SDK's model for `model`; null when it is gone. */
  async open(orgId: string, id: string, model: string): Promise<ModelConnection | null> {
    const found = await getSealedCredential(this.db, orgId, id)
    if (!found) {
      this.opened.delete(id)
      return null
    }
    const { credential, sealedKey } = found
    let kept = this.opened.get(id)
    if (kept?.sealedKey !== sealedKey) {
      kept = { sealedKey, key: this.box.open(sealedKey), models: new Map() }
      this.opened.set(id, kept)
    }
    let built = kept.models.get(model)
    if (!built) {
      built = languageModel(credential, kept.key, model, this.fetch)
      kept.models.set(model, built)
    }
    return { credential, key: kept.key, model: built }
  }
}
