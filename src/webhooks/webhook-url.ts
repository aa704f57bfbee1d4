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
  ['192.0.0.0', 24, 'a protocol-assignment address'],
  ['198.18.0.0', 15, 'a benchmarking address'],
  ['224.0.0.0', 4, 'a multicast address'],
  ['240.0.0.0', 4, 'a reserved address'],
]
const V6: Range[] = [
  ['::', 128, 'an unspecified address'],
  ['::1', 128, 'a loopback address'],
  ['fc00::', 7, 'a private (unique local) address'],
  ['fec0::', 10, 'a private (site-local) address'],
  ['fe80::', 10, 'a link-local address'],
  ['ff00::', 8, 'a multicast address'],
]

const lists = [...V4.map((r) => ({ r, family: 'ipv4' as const })), ...V6.map((r) => ({ r, family: 'ipv6' as const }))].map(({ r, family }) => {
  const list = new BlockList()
  list.addSubnet(r[0], r[1], family)
  return { list, kind: r[2] }
})

/** The 16 bytes of an IPv6 address (`::` and embedded dotted quads expanded). */
function ipv6Bytes(ip: string): number[] {
  let text = ip
  const quad = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)
  if (quad) {
    const b = quad[1]!.split('.').map(Number)
    text = text.slice(0, -quad[1]!.length) + `${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined]
  const left = head ? head.split(':') : []
  const right = tail ? tail.split(':') : []
  const groups = tail === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill('0'), ...right]
  return groups.flatMap((g) => {
    const n = parseInt(g || '0', 16)
    return [n >> 8, n & 0xff]
  })
}

/**
 * The IPv4 address an IPv6 address carries and delivers to: IPv4-mapped (::ffff:a.b.c.d),
 * IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002:AABB:CCDD::/48). Null otherwise.
 */
function embeddedIpv4(ip: string): string | null {
  const b = ipv6Bytes(ip)
  const zero = (from: number, to: number) => b.slice(from, to).every((x) => x === 0)
  const quad = (at: number) => b.slice(at, at + 4).join('.')
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) return quad(12)
  if (zero(0, 12) && !zero(12, 16)) return quad(12)
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zero(4, 12)) return quad(12)
  if (b[0] === 0x20 && b[1] === 0x02) return quad(2)
  return null
}

/**
 * What kind of non-public address `ip` is ("a loopback address", …), or null for a public
 * one. An IPv6 address that carries an IPv4 address (mapped, compatible, NAT64, 6to4) is judged
 * by the IPv4 address it reaches. The delivery worker calls this again on every address a host
 * name resolves to.
 */
export function privateAddressKind(ip: string): string | null {
  const family = isIP(ip)
  if (family === 0) return null
  const type = family === 4 ? 'ipv4' : 'ipv6'
  for (const { list, kind } of lists) if (list.check(ip, type)) return kind
  const v4 = family === 6 ? embeddedIpv4(ip) : null
  return v4 === null ? null : privateAddressKind(v4)
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
