// The one way the console reaches the service: the SDK's client on this origin's /v1, sending
// X-Warren-Source: console. The token lives in this tab's sessionStorage only: never in a URL, never
// in a cookie (a preview on a sibling host could read a cookie; it cannot read this tab's storage).
import { createWarren, ok, type Warren } from '../../sdk/src/client.ts'
import { WarrenError } from '../../sdk/src/errors.ts'

export { ok, WarrenError }

const TOKEN_KEY = 'warren.token'

export const storedToken = (): string | null => sessionStorage.getItem(TOKEN_KEY)

/** Dispatched on window when the service refuses the kept token (revoked, expired): the shell signs out. */
export const REFUSED_EVENT = 'warren:token-refused'

export function connect(token: string): Warren {
  const send: typeof fetch = async (input, init) => {
    const res = await fetch(input, init)
    if (res.status === 401) dispatchEvent(new Event(REFUSED_EVENT))
    return res
  }
  return createWarren({ baseUrl: location.origin, token, source: 'console', fetch: send })
}

/** Checks the token against the service, keeps it for this tab, and returns the client. */
export async function signIn(token: string): Promise<Warren> {
  const sdk = connect(token.trim())
  await ok(sdk.api.GET('/v1/health'))
  sessionStorage.setItem(TOKEN_KEY, token.trim())
  return sdk
}

export function signOut(): void {
  sessionStorage.removeItem(TOKEN_KEY)
}

/** A refusal as one line a person can act on: the spec's code, its message, and the request id to quote. */
export function describeError(err: unknown): string {
  if (err instanceof WarrenError) return `${err.code}: ${err.message}${err.requestId ? ` (request ${err.requestId})` : ''}`
  return err instanceof Error ? err.message : String(err)
}

/** Saves bytes the service answered as a file the browser downloads. */
export function saveBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob)
  const a = document.createElement('a')
  a.href = url
  a.download = name
  document.body.append(a)
  a.click()
  a.remove()
  setTimeout(() => URL.revokeObjectURL(url), 10_000)
}

export type Session = Awaited<ReturnType<typeof getSession>>

export async function getSession(sdk: Warren, id: string) {
  return ok(sdk.api.GET('/v1/sessions/{session_id}', { params: { path: { session_id: id } } }))
}

export const when = (ms: number | null | undefined): string => (ms ? new Date(ms).toLocaleString() : '—')
