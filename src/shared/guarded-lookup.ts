import dns from 'node:dns'
import { isIP, type LookupFunction } from 'node:net'
import { classifyAddress } from './address-policy.ts'

/** dns.lookup with `all: true`; tests inject their own answers. */
export type Resolver = (host: string, options: dns.LookupAllOptions, callback: (err: NodeJS.ErrnoException | null, addresses: dns.LookupAddress[]) => void) => void

/** A connection the SSRF guard stopped before it was made; its message is the reason to record. */
class RefusedAddressError extends Error {
  readonly code = 'EWARRENREFUSED'
}

/**
 * Why a host is refused before any lookup: a localhost name or a non-public address literal.
 * Null when only the addresses it resolves to can tell. Sockets never look up literals, so the
 * sender asks this itself. `refused` tells the reader what would allow it (the deployment's switch).
 */
export function refusedHost(host: string, refused: string): string | null {
  const h = host.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase()
  if (h === 'localhost' || h.endsWith('.localhost')) return `host ${h} is a loopback name; ${refused}`
  const kind = isIP(h) ? classifyAddress(h)?.kind : null
  return kind ? `host ${h} is ${kind}; ${refused}` : null
}

/**
 * The `lookup` of an agent that connects on someone's behalf (webhook deliveries, remote MCP
 * servers): the name is resolved once, every address it resolves to is judged, and the socket
 * connects to exactly those addresses. Checking first and letting the socket resolve again would
 * let DNS answer differently the second time (rebinding).
 */
export function guardedLookup(opts: { allowPrivate: boolean; refused: string; resolve?: Resolver }): LookupFunction {
  const refused = opts.refused
  const resolve: Resolver = opts.resolve ?? ((host, options, cb) => dns.lookup(host, options, cb))
  return (hostname, options, callback) => {
    const fail = (err: NodeJS.ErrnoException) => callback(err, '', 0)
    const early = opts.allowPrivate ? null : refusedHost(hostname, refused)
    if (early) return fail(new RefusedAddressError(early))
    resolve(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return fail(err)
      if (addresses.length === 0) return fail(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }))
      if (!opts.allowPrivate) {
        for (const a of addresses) {
          const kind = classifyAddress(a.address)?.kind
          if (kind) return fail(new RefusedAddressError(`host ${hostname} resolves to ${kind} (${a.address}); ${refused}`))
        }
      }
      if (options.all) callback(null, addresses)
      else callback(null, addresses[0]!.address, addresses[0]!.family)
    })
  }
}
