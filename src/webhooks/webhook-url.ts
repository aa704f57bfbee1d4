import { BlockList, isIP } from 'node:net'
import { ApiError } from '../errors.ts'

type Range = [address: string, prefix: number, kind: string]

// Where a delivery must never be sent unless the deployment says so: the service would otherwise
// be a way to reach its own host, its neighbours or the cloud metadata address (169.254.169.254).
const V4: Range[] = [
  ['0.0.0.0', 8, 'an unspecified address'],
  ['127.0.0.0', 8, 'a loopback address'],
  ['10.0.0.0', 8, 'a private address'],
  ['172.16.0.0', 12, 'a private address'],
  ['192.168.0.0', 16, 'a private address'],
  ['100.64.0.0', 10, 'a shared (carrier-grade NAT) address'],
  ['169.254.0.0', 16, 'a link-local address'],
]
const V6: Range[] = [
  ['::', 128, 'an unspecified address'],
  ['::1', 128, 'a loopback address'],
  ['fc00::', 7, 'a private (unique local) address'],
  ['fec0::', 10, 'a private (site-local) address'],
  ['fe80::', 10, 'a link-local address'],
]

const lists = [...V4.map((r) => ({ r, family: 'ipv4' as const })), ...V6.map((r) => ({ r, family: 'ipv6' as const }))].map(({ r, family }) => {
  const list = new BlockList()
  list.addSubnet(r[0], r[1], family)
  return { list, kind: r[2] }
})

/**
 * What kind of non-public address `ip` is ("a loopback address", …), or null for a public
 * one. IPv4-mapped IPv6 addresses (::ffff:127.0.0.1) are judged by the IPv4 address they carry.
 * The delivery worker calls this again on every address a host name resolves to.
 */
export function privateAddressKind(ip: string): string | null {
  const family = isIP(ip)
  if (family === 0) return null
  const type = family === 4 ? 'ipv4' : 'ipv6'
  for (const { list, kind } of lists) if (list.check(ip, type)) return kind
  return null
}

const isLocalhostName = (host: string): boolean => host === 'localhost' || host.endsWith('.localhost')

/**
 * Refuses a subscription URL that is not https, or (unless private targets are allowed) whose host
 * is a loopback, private or link-local address literal or a localhost name. Host names are not
 * resolved here: DNS can change after subscribing, so the worker checks resolved addresses.
 */
export function checkWebhookUrl(raw: string, allowPrivate: boolean): void {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ApiError('invalid_request', `url "${raw}" is not an absolute URL.`)
  }
  if (url.protocol !== 'https:') throw new ApiError('invalid_request', `url must use https, not "${url.protocol.replace(/:$/, '')}".`)
  if (allowPrivate) return
  // The URL parser has already normalised 2130706433, 0x7f.1 and friends to dotted IPv4.
  const host = url.hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase()
  const why = isLocalhostName(host) ? 'a loopback name' : privateAddressKind(host)
  if (why) {
    throw new ApiError(
      'invalid_request',
      `url host "${host}" is ${why}: deliveries to loopback, private and link-local addresses are refused unless the deployment sets WARREN_ALLOW_PRIVATE_WEBHOOKS.`,
    )
  }
}
