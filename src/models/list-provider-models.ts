import { ApiError } from '../errors.ts'
import type { Provider } from './models.schema.ts'

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

/**
 * Asks the provider which models the key can use (`GET {baseUrl}/models`). A key the provider
 * refuses is `provider_unauthorized`; anything else that goes wrong is `provider_error`. The
 * whole exchange is bounded by `timeoutMs`.
 */
export async function listProviderModels(provider: Provider, baseUrl: string, apiKey: string, timeoutMs = PROVIDER_TIMEOUT_MS): Promise<string[]> {
  const signal = AbortSignal.timeout(timeoutMs)
  const models: string[] = []
  let afterId: string | undefined
  for (let page = 0; page < (provider === 'anthropic' ? ANTHROPIC_MAX_PAGES : 1); page++) {
    const url = new URL(`${baseUrl}/models`)
    if (provider === 'anthropic') {
      url.searchParams.set('limit', String(ANTHROPIC_PAGE_SIZE))
      if (afterId) url.searchParams.set('after_id', afterId)
    }
    const body = await getJson(url, authHeaders(provider, apiKey), signal, timeoutMs)
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

async function getJson(url: URL, headers: Record<string, string>, signal: AbortSignal, timeoutMs: number): Promise<unknown> {
  const shown = `${url.origin}${url.pathname}`
  let res: Response
  try {
    res = await fetch(url, { headers, signal, redirect: 'error' })
  } catch (err) {
    const why = (err as Error).name === 'TimeoutError' ? `no answer within ${timeoutMs / 1000} s` : describeFetchError(err)
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
    const why = (err as Error).name === 'TimeoutError' ? `no complete answer within ${timeoutMs / 1000} s` : 'the body is not JSON'
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

/** fetch hides the reason in `cause` (ECONNREFUSED, ENOTFOUND, a TLS failure). */
function describeFetchError(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause
  return cause?.code ?? cause?.message ?? (err as Error).message
}
