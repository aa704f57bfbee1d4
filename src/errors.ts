import { STATUS_CODES } from 'node:http'
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

/**
 * When each code is sent, as the OpenAPI description says it. Keyed by the code, so a code added
 * to the table does not compile until it is described.
 */
const conditions: Record<ErrorCode, string> = {
  invalid_request: 'unknown field or parameter, out-of-range value, over-limit body',
  authentication_error: 'token missing, unrecognised, expired or revoked',
  permission_denied: 'the message names the scope wanted',
  not_found: 'no such endpoint, or no such object in the organization',
  method_not_allowed: 'the path exists, the method does not',
  conflict: 'the state does not allow the call',
  queue_full: 'already 5 messages wait behind the current turn',
  rate_limit_exceeded: 'past a bucket or a stream ceiling, with Retry-After',
  project_limit_exceeded: 'the organization is at its session ceiling; retrying never succeeds',
  internal_error: 'quote request_id',
  directory_unavailable: 'the token directory cannot be reached, with Retry-After',
  context_length_exceeded: 'the conversation does not fit the model',
  provider_error: 'the model provider failed',
  provider_unauthorized: 'the model provider refused the key',
  sandbox_error: 'the sandbox failed',
  sandbox_unavailable: 'no sandbox can be had now',
  workspace_recovery_failed: 'the workspace could not be restored',
  bridge_incompatible: 'the bridge speaks another version',
}

const codesOf = (status: number) => (Object.keys(ErrorStatus) as ErrorCode[]).filter((c) => ErrorStatus[c] === status)

/** The OpenAPI entry of one error status: the error shape, its code one of those the table sends with it. */
export function errorResponse(status: number): typeof ErrorBody {
  const codes = codesOf(status)
  if (codes.length === 0) throw new Error(`No error code is sent with status ${status}.`)
  const code = Type.String({ enum: codes, description: 'One of the codes listed under Errors; callers branch on it.' })
  return Type.Object({ error: Type.Object({ ...ErrorBody.properties.error.properties, code }, { additionalProperties: false }) }, {
    additionalProperties: false,
    // Named in the OpenAPI description after its status (404: NotFoundError), as its codes differ by status.
    $id: `${(STATUS_CODES[status] ?? `Status${status}`).replace(/[^A-Za-z]/g, '').replace(/Error$/, '')}Error`,
    description: codes.map((c) => `${c}: ${conditions[c]}`).join('; '),
  }) as unknown as typeof ErrorBody
}

/**
 * OpenAPI entries for the given error statuses, built from the same table the runtime uses. 400 is
 * always among them: any endpoint refuses an unknown query parameter or body field.
 */
export function errorResponses(...statuses: number[]): Record<number, typeof ErrorBody> {
  const out: Record<number, typeof ErrorBody> = {}
  for (const s of [...new Set([...statuses, 400, 401, 403, 429, 503, 500])].sort((a, b) => a - b)) out[s] = errorResponse(s)
  return out
}

export const notFound = (what: string, id: string) => new ApiError('not_found', `No ${what} with id "${id}".`)
