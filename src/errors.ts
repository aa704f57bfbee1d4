import { Type } from 'typebox'

/** The specification's error codes and the HTTP status each is sent with. */
export const ErrorStatus = {
  invalid_request: 400,
  authentication_error: 401,
  permission_denied: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  queue_full: 429,
  rate_limit_exceeded: 429,
  project_limit_exceeded: 429,
  internal_error: 500,
  directory_unavailable: 503,
  context_length_exceeded: 400,
  provider_error: 502,
  provider_unauthorized: 400,
  sandbox_error: 500,
  sandbox_unavailable: 503,
  workspace_recovery_failed: 500,
  bridge_incompatible: 400,
} as const

export type ErrorCode = keyof typeof ErrorStatus

export class ApiError extends Error {
  readonly code: ErrorCode
  readonly status: number
  /** Extra response headers, such as Retry-After. */
  readonly headers: Record<string, string>
  constructor(code: ErrorCode, message: string, options?: ErrorOptions & { headers?: Record<string, string> }) {
    super(message, options)
    this.code = code
    this.status = ErrorStatus[code]
    this.headers = options?.headers ?? {}
  }
}

export const ErrorBody = Type.Object(
  {
    error: Type.Object(
      {
        code: Type.String({ description: 'One of the codes listed under Errors; callers branch on it.' }),
        message: Type.String(),
        request_id: Type.String({ description: 'Equals the x-request-id response header.' }),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, description: 'Every refusal has this shape and no other key.' },
)

const descriptions: Record<number, string> = {
  400: 'invalid_request (or a listed provider/bridge code)',
  401: 'authentication_error: token missing, unrecognised, expired or revoked',
  403: 'permission_denied: the message names the scope wanted',
  404: 'not_found',
  409: 'conflict',
  429: 'rate_limit_exceeded, project_limit_exceeded or queue_full',
  502: 'provider_error',
  503: 'directory_unavailable, with Retry-After',
}

/**
 * OpenAPI entries for the given error statuses, built from the same table the runtime uses. 400 is
 * always among them: any endpoint refuses an unknown query parameter or body field.
 */
export function errorResponses(...statuses: number[]): Record<number, typeof ErrorBody> {
  const out: Record<number, typeof ErrorBody> = {}
  for (const s of [...new Set([...statuses, 400, 401, 403, 429, 503, 500])].sort((a, b) => a - b)) {
    out[s] = Type.Object(ErrorBody.properties, {
      additionalProperties: false,
      description: descriptions[s] ?? 'internal_error: quote request_id',
    }) as typeof ErrorBody
  }
  return out
}

export const notFound = (what: string, id: string) => new ApiError('not_found', `No ${what} with id "${id}".`)
