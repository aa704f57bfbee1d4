/**
 * Why a connection on someone's behalf failed (a webhook delivery, a remote MCP server), in words
 * that never name the address it was made to. Node's own messages do ("connect ECONNREFUSED
 * 10.0.5.3:8080"): for a name the caller gave, that is the host's resolver answering them, an
 * internal address they should not learn. The host they named is theirs to know; where it led is not.
 */
const WORDS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset by the server',
  ETIMEDOUT: 'the connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  EHOSTDOWN: 'host down',
  ECONNABORTED: 'connection aborted',
  EPIPE: 'connection closed by the server',
  EADDRNOTAVAIL: 'address not available',
}

/** The errors `err` wraps, itself first (fetch and SDKs hide the socket's error in `cause`). */
function* chain(err: unknown): Generator<Error & { code?: unknown; address?: unknown }> {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) yield e
}

/** Plain words and the code for a socket error anywhere in `err`'s chain; null when there is none. */
export function connectionFailure(err: unknown): string | null {
  for (const e of chain(err)) if (typeof e.code === 'string' && WORDS[e.code]) return `${WORDS[e.code]} (${e.code})`
  return null
}

/** `message` with every address a socket error in `err`'s chain names (and its port) taken out. */
export function withoutAddresses(message: string, err: unknown): string {
  let out = message
  for (const e of chain(err)) {
    if (typeof e.address !== 'string' || e.address === '') continue
    const port = (e as { port?: unknown }).port
    if (port !== undefined) out = out.split(`${e.address}:${String(port)}`).join('the server')
    out = out.split(e.address).join('the server')
  }
  return out
}
