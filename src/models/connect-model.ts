import { lockKey, type Store } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import type { PrivatePolicy } from '../shared/address-policy.ts'
import { hostRefusal } from '../shared/guarded-lookup.ts'
import { newId } from '../shared/ids.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import { toJson } from '../shared/json.ts'
import { listProviderModels } from './list-provider-models.ts'
import { DEFAULT_BASE_URLS, MAX_CREDENTIALS_PER_ORG, MODEL_REFUSED, type CreateModelCredentialBody } from './models.schema.ts'
import {
  clearDefaultCredential,
  countCredentials,
  findConnected,
  getCredentialView,
  getDefaultCredential,
  insertCredential,
  keyFingerprint,
  keyHint,
  newestCreatedAt,
  setDefaultCredential,
  type CredentialView,
} from './models.store.ts'

export type Connected = { credential: CredentialView; created: boolean }

/** The connection key that serializes an organization's connects and deletes on PostgreSQL. */
export const credentialsLock = (orgId: string) => `model_credentials:${orgId}`

/**
 * Normalized (host lower-cased, trailing slashes dropped) so that `…/v1` and `…/v1/` are one
 * connection. An address literal or localhost name the outbound policy refuses under
 * WARREN_MODEL_ALLOW_PRIVATE is refused here, `models` given or not; a name is judged by the
 * addresses it resolves to each time the service connects.
 */
function resolveBaseUrl(body: CreateModelCredentialBody, allowPrivate: PrivatePolicy): string {
  const raw = body.base_url ?? DEFAULT_BASE_URLS[body.provider]
  if (raw === null) throw new ApiError('invalid_request', 'Missing required field "base_url": an openai_compatible connection needs the server address.')
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ApiError('invalid_request', `"base_url" is not a valid http(s) address: "${raw}".`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ApiError('invalid_request', `"base_url" must be an http(s) address, not ${url.protocol}`)
  const refused = hostRefusal(url.hostname, allowPrivate)
  if (refused) throw new ApiError('invalid_request', `"base_url" host ${url.hostname} is ${refused}: ${MODEL_REFUSED}.`)
  if (url.username || url.password) throw new ApiError('invalid_request', '"base_url" must not carry credentials; send the key in "api_key".')
  if (url.search || url.hash) throw new ApiError('invalid_request', '"base_url" must not carry a query or fragment: paths such as /models are appended to it.')
  return url.href.replace(/\/+$/, '')
}

const limitError = () =>
  new ApiError('invalid_request', `This organization already has ${MAX_CREDENTIALS_PER_ORG} model connections, the limit; delete one before connecting another.`)

/**
 * Connects a model provider for the organization. The same provider, address and key connected
 * again returns the existing connection (created: false) and costs nothing against the limit.
 * The provider is asked for its models outside the transaction, so no lock is held across the network.
 */
export async function connectModel(store: Store, box: SecretBox, allowPrivate: PrivatePolicy, orgId: string, body: CreateModelCredentialBody): Promise<Connected> {
  const baseUrl = resolveBaseUrl(body, allowPrivate)
  const fingerprint = keyFingerprint(body.api_key)

  const existing = await findConnected(store.db, orgId, body.provider, baseUrl, fingerprint)
  if (existing) return { credential: await reconnect(store, orgId, existing, body.default === true), created: false }
  if ((await countCredentials(store.db, orgId)) >= MAX_CREDENTIALS_PER_ORG) throw limitError()

  const models = body.models ?? (await listProviderModels(body.provider, baseUrl, body.api_key, allowPrivate))

  return store.db.transaction().execute(async (trx) => {
    await lockKey(trx, store.dialect, credentialsLock(orgId))
    const raced = await findConnected(trx, orgId, body.provider, baseUrl, fingerprint)
    if (raced) {
      if (body.default === true && !raced.isDefault) await setDefaultCredential(trx, orgId, raced.id)
      return { credential: { ...raced, isDefault: raced.isDefault || body.default === true }, created: false }
    }
    if ((await countCredentials(trx, orgId)) >= MAX_CREDENTIALS_PER_ORG) throw limitError()
    // An organization with connections always has exactly one default, so "none yet" means "first".
    const makeDefault = body.default === true || (await getDefaultCredential(trx, orgId)) === null
    const id = newId('mc')
    if (makeDefault) await clearDefaultCredential(trx, orgId)
    const credential = await insertCredential(trx, {
      id,
      org_id: orgId,
      provider: body.provider,
      base_url: baseUrl,
      name: body.name ?? (body.provider === 'openai_compatible' ? new URL(baseUrl).host : body.provider),
      models: toJson(models),
      is_default: makeDefault ? 1 : 0,
      key_hint: keyHint(body.api_key),
      key_fingerprint: fingerprint,
      api_key_enc: box.seal(body.api_key),
      // Strictly increasing within the organization, so that "oldest" (which decides the next default) is never a tie.
      created_at: Math.max(Date.now(), (await newestCreatedAt(trx, orgId)) + 1),
    })
    return { credential, created: true }
  })
}

/** A re-connect changes nothing, except that `default: true` is honoured. */
async function reconnect(store: Store, orgId: string, existing: CredentialView, makeDefault: boolean): Promise<CredentialView> {
  if (!makeDefault || existing.isDefault) return existing
  return store.db.transaction().execute(async (trx) => {
    await lockKey(trx, store.dialect, credentialsLock(orgId))
    await setDefaultCredential(trx, orgId, existing.id)
    return (await getCredentialView(trx, orgId, existing.id)) ?? existing
  })
}
