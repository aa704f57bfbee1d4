/** The body of every refusal (the specification's Error shape). */
export type ErrorBody = { error: { code: string; message: string; request_id: string } }

/** A refusal from the service, or an answer that was not the service's (a proxy's page, a cut stream). */
export class WarrenError extends Error {
  override readonly name = 'WarrenError'
  /** The HTTP status (0 when no answer came). */
  readonly status: number
  /** `error.code` from the body: what callers branch on (`not_found`, `rate_limit_exceeded`, …). */
  readonly code: string
  /** `error.request_id`, the `x-request-id` header: quote it when reporting a problem. */
  readonly requestId: string | null
  /** Seconds from `Retry-After`, when the answer carried one. */
  readonly retryAfter: number | null

  constructor(status: number, code: string, message: string, requestId: string | null, retryAfter: number | null = null) {
    super(message)
    this.status = status
    this.code = code
    this.requestId = requestId
    this.retryAfter = retryAfter
  }

  /** The error an answer stands for, read from its body when it has the Error shape. */
  static async from(res: Response, body?: unknown): Promise<WarrenError> {
    const parsed = body ?? (await res.text().then((t) => safeJson(t), () => null))
    const retryAfter = retryAfterSeconds(res)
    const requestId = res.headers.get('x-request-id')
    if (isErrorBody(parsed)) return new WarrenError(res.status, parsed.error.code, parsed.error.message, parsed.error.request_id ?? requestId, retryAfter)
    return new WarrenError(res.status, 'unexpected_response', `The service answered ${res.status} ${res.statusText} without an error body.`, requestId, retryAfter)
  }
}

export function isErrorBody(v: unknown): v is ErrorBody {
  const e = (v as { error?: { code?: unknown; message?: unknown } } | null)?.error
  return typeof e?.code === 'string' && typeof e.message === 'string'
}

export function retryAfterSeconds(res: Response): number | null {
  const raw = res.headers.get('retry-after')
  if (raw === null) return null
  const n = Number(raw)
  // The service sends whole seconds; an HTTP date from something in between is honoured too.
  if (Number.isFinite(n)) return Math.max(0, n)
  const at = Date.parse(raw)
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - Date.now()) / 1000))
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return null
  }
}
