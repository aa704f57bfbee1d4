import { ApiError } from '../errors.ts'

/** Open event streams allowed at once (Limits: per token and per organization). */
export const STREAMS_PER_TOKEN = 5
export const STREAMS_PER_ORG = 20
/** What a refused client is told to wait: a slot of a client that just went away is freed by then. */
const RETRY_AFTER_SECONDS = 5

export type StreamSlots = {
  /** Takes a slot or throws 429 rate_limit_exceeded; the returned function gives it back (once). */
  acquire(tokenId: string, orgId: string): () => void
  open(): number
}

/**
 * Counts open streams in this process. A slot is held from the moment the stream is accepted
 * until its connection closes, which the stream detects at once for a client that closes its
 * socket and through TCP keep-alive and failed pings for one that vanished.
 */
export function streamSlots(perToken = STREAMS_PER_TOKEN, perOrg = STREAMS_PER_ORG): StreamSlots {
  const byToken = new Map<string, number>()
  const byOrg = new Map<string, number>()
  let total = 0
  const bump = (m: Map<string, number>, k: string, d: number) => {
    const n = (m.get(k) ?? 0) + d
    if (n <= 0) m.delete(k)
    else m.set(k, n)
  }
  return {
    acquire(tokenId, orgId) {
      const refuse = (what: string, max: number) =>
        new ApiError('rate_limit_exceeded', `${what} already has ${max} open event streams, its ceiling; close one or retry after ${RETRY_AFTER_SECONDS} s (a slot is freed a few seconds after its client goes away).`, {
          headers: { 'retry-after': String(RETRY_AFTER_SECONDS) },
        })
      if ((byToken.get(tokenId) ?? 0) >= perToken) throw refuse('This token', perToken)
      if ((byOrg.get(orgId) ?? 0) >= perOrg) throw refuse('This organization', perOrg)
      bump(byToken, tokenId, 1)
      bump(byOrg, orgId, 1)
      total++
      let released = false
      return () => {
        if (released) return
        released = true
        bump(byToken, tokenId, -1)
        bump(byOrg, orgId, -1)
        total--
      }
    },
    open: () => total,
  }
}
