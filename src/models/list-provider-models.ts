import { ApiError } from '../errors.ts'
import type { PrivatePolicy } from '../shared/address-policy.ts'
import { guardedFetch, type GuardedFetch } from '../shared/guarded-fetch.ts'
import { isRefusedAddress } from '../shared/guarded-lookup.ts'
import { MODEL_REFUSED, type Provider } from './models.schema.ts'

export const PROVIDER_TIMEOUT_MS = 10_000
// Anthropic pages its model list; a few pages of its maximum page size cover any real account.
const ANTHROPIC_PAGE_SIZE = 1000
const ANTHROPIC_MAX_PAGES = 5

const PASS_MODELS = 'Pass "models" to connect without asking the provider.'

/** How each provider wants the key presented. openai_compatible servers speak OpenAI's dialect. */
function authHeaders(provider: Provider, apiKey: string): Record<string, string> {
  return provider === 'anthropic'
    ? { 'x-api-key': apiKey, 'anthropic-version': '2023-06-01', accept: 'application/json' }
    : { authorization: `Bearer ${apiKey}`, accept: 'application/json' }
}

/** One guarded fetch per policy, so that its keep-alive agents are made once, not per connect. */
const fetches = new Map<string, GuardedFetch>()
function fetchUnder(allowPrivate: PrivatePolicy): GuardedFetch {
  const key = allowPrivate.join(',')
  let f = fetches.get(key)
  if (!f) fetches.set(key, (f = guardedFetch({ allowPrivate, refused: MODEL_REFUSED, what: 'model servers' })))
  return f
}

/**
 * Asks the provider which models the key can use (`GET {baseUrl}/models`), through the outbound
 * policy under `allowPrivate` (WARREN_MODEL_ALLOW_PRIVATE): a name resolving to an address it
 * refuses is `invalid_request`, with no connection made. A key the provider refuses is
 * `provider_unauthorized`; anything else that goes wrong is `provider_error`, told by status and
 * never by what the far end wrote. The whole exchange is bounded by `timeoutMs`.
 */
export async function listProviderModels(provider: Provider, baseUrl: string, apiKey: string, allowPrivate: PrivatePolicy, timeoutMs = PROVIDER_TIMEOUT_MS): Promise<string[]> {
  const signal = AbortSignal.timeout(timeoutMs)
  const fetch = fetchUnder(allowPrivate)
  const models: string[] = []
  let afterId: string | undefined
  for (let page = 0; page < (provider === 'anthropic' ? ANTHROPIC_MAX_PAGES : 1); page++) {
    const url = new URL(`${baseUrl}/models`)
    if (provider === 'anthropic') {
      url.searchParams.set('limit', String(ANTHROPIC_PAGE_SIZE))
      if (afterId) url.searchParams.set('after_id', afterId)
    }
    const body = await getJson(fetch, url, authHeaders(provider, apiKey), signal, timeoutMs)
    const ids = readModelIds(body)
    if (!ids) throw new ApiError('provider_error', `GET ${baseUrl}/models did not answer with a model list (expected data[].id). ${PASS_MODELS}`)
    models.push(...ids)
    const b = body as { has_more?: unknown; last_id?: unknown }
    if (provider !== 'anthropic' || b.has_more !== true || typeof b.last_id !== 'string') break
    afterId = b.last_id
  }
  const unique = [...new Set(models)]
  if (unique.length === 0) throw new ApiError('provider_error', `The provider at ${baseUrl} listed no models. ${PASS_MODELS}`)
  return unique
}

async function getJson(fetch: GuardedFetch, url: URL, headers: Record<string, string>, signal: AbortSignal, timeoutMs: number): Promise<unknown> {
  const shown = `${url.origin}${url.pathname}`
  let res: Response
  try {
    // A redirect is not followed: its 3xx is an answer like any other that is not a model list.
    res = await fetch(url, { headers, signal })
  } catch (err) {
    // Neither the address nor its kind: the caller learns nothing of what the host's resolver knows.
    if (isRefusedAddress(err)) throw new ApiError('invalid_request', `"base_url" host ${url.hostname} resolves to an address this deployment does not allow; ${MODEL_REFUSED}. No connection was made.`, { cause: err })
    const why = signal.aborted ? `no answer within ${timeoutMs / 1000} s` : describeFetchError(err)
    throw new ApiError('provider_error', `Could not reach the provider at ${shown} (${why}). ${PASS_MODELS}`, { cause: err })
  }
  if (res.status === 401 || res.status === 403) {
    await res.body?.cancel()
    throw new ApiError('provider_unauthorized', `The provider refused the API key (HTTP ${res.status} from GET ${shown}).`)
  }
  if (!res.ok) {
    await res.body?.cancel()
    throw new ApiError('provider_error', `GET ${shown} answered HTTP ${res.status}. ${PASS_MODELS}`)
  }
  try {
    return await res.json()
  } catch (err) {
    const why = signal.aborted ? `no complete answer within ${timeoutMs / 1000} s` : 'the body is not JSON'
    throw new ApiError('provider_error', `GET ${shown} could not be read: ${why}. ${PASS_MODELS}`, { cause: err })
  }
}

/** Reads only `data[].id`, the one part OpenAI's and Anthropic's answers share. */
function readModelIds(body: unknown): string[] | null {
  const data = (body as { data?: unknown } | null)?.data
  if (!Array.isArray(data)) return null
  const ids = data.map((m) => (m as { id?: unknown } | null)?.id).filter((id): id is string => typeof id === 'string' && id.length > 0 && id.length <= 200)
  return ids
}

/** The reason by its code (ECONNREFUSED, ENOTFOUND, a TLS failure), which fetch hides in `cause`. */
function describeFetchError(err: unknown): string {
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } }
  return e.code ?? e.cause?.code ?? e.cause?.message ?? e.message ?? String(err)
}
