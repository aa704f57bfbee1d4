import dns from 'node:dns'
import { isIP, type LookupFunction } from 'node:net'
import { addressRefusal, type PrivatePolicy } from './address-policy.ts'

/** dns.lookup with `all: true`; tests inject their own answers. */
export type Resolver = (host: string, options: dns.LookupAllOptions, callback: (err: NodeJS.ErrnoException | null, addresses: dns.LookupAddress[]) => void) => void

/** A connection the SSRF guard stopped before it was made; its message is the reason to record. */
export class RefusedAddressError extends Error {
  readonly code = 'EWARRENREFUSED'
}

/** Whether `err`, or what it wraps (fetch's `cause`), is a connection the guard refused. */
export function isRefusedAddress(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) if ((e as { code?: unknown }).code === 'EWARRENREFUSED') return true
  return false
}

/** A host as it is judged: no brackets, no trailing dot, lower case. */
const bareHost = (host: string) => host.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase()

/**
 * What a host is that `allowed` does not open before any lookup: a localhost name (unless
 * loopback is allowed: then it is resolved and its addresses judged) or a non-public address
 * literal ("a loopback address"). Null when only the addresses it resolves to can tell.
 */
export function hostRefusal(host: string, allowed: PrivatePolicy = []): string | null {
  const h = bareHost(host)
  const loopbackAllowed = addressRefusal('127.0.0.1', allowed) === null || addressRefusal('::1', allowed) === null
  if ((h === 'localhost' || h.endsWith('.localhost')) && !loopbackAllowed) return 'a loopback name'
  return isIP(h) ? addressRefusal(h, allowed) : null
}

/**
 * Why a host is refused before any lookup (see hostRefusal), worded for a log or an error. Sockets
 * never look up literals, so the sender asks this itself. `refused` tells the reader what would
 * allow it (the deployment's setting).
 */
export function refusedHost(host: string, refused: string, allowed: PrivatePolicy = []): string | null {
  const kind = hostRefusal(host, allowed)
  return kind ? `host ${bareHost(host)} is ${kind}; ${refused}` : null
}

/**
 * The `lookup` of an agent that connects on someone's behalf (webhook deliveries, remote MCP
 * servers, model providers): the name is resolved once, every address it resolves to is judged, and the socket
 * connects to exactly those addresses. Checking first and letting the socket resolve again would
 * let DNS answer differently the second time (rebinding).
 */
export function guardedLookup(opts: { allowPrivate: PrivatePolicy; refused: string; resolve?: Resolver }): LookupFunction {
  const refused = opts.refused
  const resolve: Resolver = opts.resolve ?? ((host, options, cb) => dns.lookup(host, options, cb))
  return (hostname, options, callback) => {
    const fail = (err: NodeJS.ErrnoException) => callback(err, '', 0)
    const early = refusedHost(hostname, refused, opts.allowPrivate)
    if (early) return fail(new RefusedAddressError(early))
    resolve(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return fail(err)
      if (addresses.length === 0) return fail(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }))
      for (const a of addresses) {
        // The kind, never the address: the caller named the host, where it leads is the host's resolver's to know.
        const kind = addressRefusal(a.address, opts.allowPrivate)
        if (kind) return fail(new RefusedAddressError(`host ${hostname} resolves to ${kind}; ${refused}`))
      }
      if (options.all) callback(null, addresses)
      else callback(null, addresses[0]!.address, addresses[0]!.family)
    })
  }
}
