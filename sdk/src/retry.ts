import { isErrorBody, retryAfterSeconds, WarrenError } from './errors.ts'

export type RetryOptions = {
  /** Attempts after the first; 0 turns retrying off. Default 3. */
  retries?: number
  /** A `Retry-After` longer than this is not waited for: the refusal is returned. Default 60 s. */
  maxWaitMs?: number
}

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])
/** Statuses of something between the caller and the service (or a service restarting), worth a second try. */
const GATEWAY = new Set([502, 503, 504])

const sleep = (ms: number, signal: AbortSignal | null) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason)
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', stop)
      resolve()
    }, ms)
    const stop = () => {
      clearTimeout(t)
      reject(signal!.reason)
    }
    signal?.addEventListener('abort', stop, { once: true })
  })

/** 250 ms, 500 ms, 1 s, … with jitter, for failures that say nothing of when to come back. */
const backoff = (attempt: number) => Math.min(8000, 250 * 2 ** attempt) * (0.5 + Math.random() / 2)

/**
 * A fetch that retries what is safe to retry. Every mutation gets an `Idempotency-Key` (one the
 * caller set is kept) before its first attempt, so a retry after a lost answer is answered from the
 * first one instead of acting twice. `rate_limit_exceeded` and `directory_unavailable` are retried
 * after their `Retry-After`; `project_limit_exceeded` never is (retrying never succeeds), nor is
 * `queue_full`. A 409 is retried only after an attempt whose answer was lost: it is then most likely
 * the first attempt, still in flight under the same key.
 */
export function retryingFetch(base: typeof fetch, opts: RetryOptions = {}): typeof fetch {
  const retries = opts.retries ?? 3
  const maxWaitMs = opts.maxWaitMs ?? 60_000
  return async (input, init) => {
    const request = new Request(input, init)
    if (MUTATING.has(request.method) && !request.headers.has('idempotency-key')) request.headers.set('idempotency-key', crypto.randomUUID())
    let answerLost = false
    for (let attempt = 0; ; attempt++) {
      const last = attempt >= retries
      let res: Response
      try {
        res = await base(last ? request : request.clone())
      } catch (err) {
        if (request.signal.aborted) throw err
        if (last) throw unreachable(request, err)
        answerLost = true
        await sleep(backoff(attempt), request.signal)
        continue
      }
      if (last) return res
      const wait = await waitBeforeRetry(res, attempt, answerLost)
      if (wait === null || wait > maxWaitMs) return res
      await res.body?.cancel()
      await sleep(wait, request.signal)
    }
  }
}

/** How long to wait before trying `res`'s request again; null when it must not be retried. */
async function waitBeforeRetry(res: Response, attempt: number, answerLost: boolean): Promise<number | null> {
  if (res.status === 429 || res.status === 503) {
    const code = await errorCode(res)
    if (code === 'rate_limit_exceeded' || code === 'directory_unavailable') return (retryAfterSeconds(res) ?? 1) * 1000
    if (code !== null) return null
  }
  if (res.status === 409 && answerLost) return backoff(attempt)
  if (GATEWAY.has(res.status)) {
    const after = retryAfterSeconds(res)
    return after !== null ? after * 1000 : backoff(attempt)
  }
  return null
}

async function errorCode(res: Response): Promise<string | null> {
  try {
    const body: unknown = await res.clone().json()
    return isErrorBody(body) ? body.error.code : null
  } catch {
    return null
  }
}

/** What a request no answer came for stands for: fetch's own "fetch failed" names neither the address nor why. */
function unreachable(request: Request, err: unknown): WarrenError {
  const cause = (err as { cause?: { code?: unknown; message?: unknown } } | null)?.cause
  const why = typeof cause?.code === 'string' ? cause.code : typeof cause?.message === 'string' ? cause.message : err instanceof Error ? err.message : String(err)
  const error = new WarrenError(0, 'service_unreachable', `Could not reach the service at ${new URL(request.url).origin} (${why}).`, null)
  return Object.assign(error, { cause: err })
}
