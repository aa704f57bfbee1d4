import dns from 'node:dns'
import { isIP, type LookupFunction } from 'node:net'
import { classifyAddress } from '../shared/address-policy.ts'

/** dns.lookup with `all: true`; tests inject their own answers. */
export type Resolver = (host: string, options: dns.LookupAllOptions, callback: (err: NodeJS.ErrnoException | null, addresses: dns.LookupAddress[]) => void) => void

const REFUSED = 'deliveries to loopback, private and link-local addresses are refused unless WARREN_ALLOW_PRIVATE_WEBHOOKS is set'

/** A delivery the SSRF guard stopped before any connection; its message is the recorded reason. */
class RefusedAddressError extends Error {
  readonly code = 'EWARRENREFUSED'
}

/**
 * Why a host is refused before any lookup: a localhost name or a non-public address literal.
 * Null when only the addresses it resolves to can tell. Sockets never look up literals, so the
 * sender asks this itself.
 */
export function refusedHost(host: string, refused = REFUSED): string | null {
  const h = host.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase()
  if (h === 'localhost' || h.endsWith('.localhost')) return `host ${h} is a loopback name; ${refused}`
  const kind = isIP(h) ? classifyAddress(h)?.kind : null
  return kind ? `host ${h} is ${kind}; ${refused}` : null
}

/**
 * The `lookup` of the delivery agent: the name is resolved once, every address it resolves to is
 * judged, and the socket connects to exactly those addresses. Checking first and letting the
 * socket resolve again would let DNS answer differently the second time (rebinding).
 */
export function guardedLookup(opts: { allowPrivate: boolean; resolve?: Resolver; refused?: string }): LookupFunction {
  const refused = opts.refused ?? REFUSED
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
