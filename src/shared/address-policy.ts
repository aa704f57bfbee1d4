import { BlockList, isIP } from 'node:net'
import { networkInterfaces } from 'node:os'

/**
 * The one judgement of where the service may open a connection on someone else's behalf: webhook
 * deliveries, remote MCP servers, model providers and the sandboxes' egress proxy all ask here. Otherwise a caller
 * could reach the service's own host, its neighbours or the cloud metadata address
 * (169.254.169.254) through whichever of them judged an address more leniently.
 */

/** What a non-public address is, and whether a deployment may open it all the same. */
export type AddressClass = {
  /** Worded to follow "is" or "resolves to": "a loopback address", "the host's own address". */
  kind: string
  /** never: refused whatever the deployment allows; private: a deployment may allow its range. */
  reach: 'never' | 'private'
}

type Range = [cidr: string, kind: string]

// Nothing outside the machine answers at these, or the answer is not the one asked for.
const NEVER: Range[] = [
  ['0.0.0.0/8', 'an unspecified address'],
  ['127.0.0.0/8', 'a loopback address'],
  ['169.254.0.0/16', 'a link-local address'],
  ['224.0.0.0/4', 'a multicast address'],
  ['240.0.0.0/4', 'a reserved address'],
  ['::/128', 'an unspecified address'],
  ['::1/128', 'a loopback address'],
  ['fe80::/10', 'a link-local address'],
  ['ff00::/8', 'a multicast address'],
  ['100::/64', 'a discard-only address'],
]
// Not on the public internet, but a deployment may run a server there (the *_ALLOW_PRIVATE settings).
const PRIVATE: Range[] = [
  ['10.0.0.0/8', 'a private address'],
  ['172.16.0.0/12', 'a private address'],
  ['192.168.0.0/16', 'a private address'],
  ['100.64.0.0/10', 'a shared (carrier-grade NAT) address'],
  ['192.0.0.0/24', 'a protocol-assignment address'],
  ['198.18.0.0/15', 'a benchmarking address'],
  ['192.0.2.0/24', 'a documentation address'],
  ['198.51.100.0/24', 'a documentation address'],
  ['203.0.113.0/24', 'a documentation address'],
  ['fc00::/7', 'a private (unique local) address'],
  ['fec0::/10', 'a private (site-local) address'],
  ['64:ff9b:1::/48', 'a local-use NAT64 address'],
  ['2001:2::/48', 'a benchmarking address'],
  ['2001:db8::/32', 'a documentation address'],
  ['3fff::/20', 'a documentation address'],
]

const compile = (ranges: Range[]) =>
  ranges.map(([cidr, kind]) => {
    const [net, bits] = cidr.split('/') as [string, string]
    const list = new BlockList()
    list.addSubnet(net, Number(bits), isIP(net) === 4 ? 'ipv4' : 'ipv6')
    return { list, kind }
  })
const NEVER_LISTS = compile(NEVER)
const PRIVATE_LISTS = compile(PRIVATE)
/** The IPv6 ranges of both tables: an address in one is judged as itself, whatever IPv4 it may carry. */
const V6_LISTS = compile([...NEVER, ...PRIVATE].filter(([cidr]) => cidr.includes(':')))

/**
 * An IPv6 address in one spelling (lower-case hex, `::` compressed, no dotted quad, no zone), so
 * that two spellings of one address compare equal. Null when it is not an IPv6 address.
 */
function canonicalV6(ip: string): string | null {
  try {
    return new URL(`http://[${ip.replace(/%.*$/, '')}]/`).hostname.slice(1, -1)
  } catch {
    return null
  }
}

/** The eight 16-bit groups of a canonical IPv6 address. */
function groups(canonical: string): number[] {
  const [head, tail] = canonical.includes('::') ? canonical.split('::') : [canonical, undefined]
  const left = head ? head.split(':') : []
  const right = tail ? tail.split(':') : []
  const all = tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right]
  return all.map((g) => parseInt(g, 16))
}

const quad = (hi: number, lo: number) => [hi >> 8, hi & 255, lo >> 8, lo & 255].join('.')

/**
 * The IPv4 address an IPv6 address delivers to, which is what it must be judged by: IPv4-mapped
 * (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96), IPv4-compatible (::/96), NAT64
 * (64:ff9b::/96), 6to4 (2002::/16, the site router's address) and Teredo (2001::/32, the client's
 * address, stored inverted). Null for any other address.
 */
export function embeddedIpv4(ip: string): string | null {
  const canonical = isIP(ip) === 6 ? canonicalV6(ip) : null
  if (canonical === null) return null
  const g = groups(canonical)
  const zero = (from: number, to: number) => g.slice(from, to).every((x) => x === 0)
  if (zero(0, 5) && g[5] === 0xffff) return quad(g[6]!, g[7]!)
  if (zero(0, 4) && g[4] === 0xffff && g[5] === 0) return quad(g[6]!, g[7]!)
  if (zero(0, 6)) return quad(g[6]!, g[7]!)
  if (g[0] === 0x64 && g[1] === 0xff9b && zero(2, 6)) return quad(g[6]!, g[7]!)
  if (g[0] === 0x2002) return quad(g[1]!, g[2]!)
  if (g[0] === 0x2001 && g[1] === 0) return quad(g[6]! ^ 0xffff, g[7]! ^ 0xffff)
  return null
}

/** One spelling per address: IPv4 as given (isIP accepts only dotted decimal), IPv6 canonical. */
const canonical = (ip: string): string => (isIP(ip) === 6 ? (canonicalV6(ip) ?? ip) : ip)

let ownCache = { at: 0, addrs: new Set<string>() }

/** The host's own addresses, re-read every 2 s: cheap, and interfaces come and go with sandboxes. */
function hostOwnAddresses(): Set<string> {
  const now = Date.now()
  if (now - ownCache.at > 2000) {
    const addrs = new Set<string>()
    for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) addrs.add(canonical(a.address))
    ownCache = { at: now, addrs }
  }
  return ownCache.addrs
}

/**
 * What kind of non-public address `ip` is, or null for a public one. A string that is not an IP
 * address is never reachable. The host's own addresses (any interface, public ones included) are
 * never reachable either: through them the service's own ports (the API, PostgreSQL) answer.
 */
export function classifyAddress(ip: string): AddressClass | null {
  const family = isIP(ip)
  if (family === 0) return { kind: 'not an IP address', reach: 'never' }
  // An IPv6 address that carries an IPv4 one is judged as both, the stricter verdict winning.
  const v4 = family === 6 ? embeddedIpv4(ip) : null
  const targets: [string, 'ipv4' | 'ipv6'][] = [[ip.replace(/%.*$/, ''), family === 4 ? 'ipv4' : 'ipv6'], ...(v4 === null ? [] : [[v4, 'ipv4'] as [string, 'ipv4']])]
  const inRanges = (lists: typeof NEVER_LISTS) => targets.map(([a, type]) => lists.find((r) => r.list.check(a, type))).find((r) => r !== undefined)
  const never = inRanges(NEVER_LISTS)
  if (never) return { kind: never.kind, reach: 'never' }
  const own = hostOwnAddresses()
  if (targets.some(([a]) => own.has(canonical(a)))) return { kind: "the host's own address", reach: 'never' }
  const priv = inRanges(PRIVATE_LISTS)
  return priv ? { kind: priv.kind, reach: 'private' } : null
}

/** Whether an IP address lies in a CIDR; an IPv6 address that carries an IPv4 one counts as both. */
export function inCidr(ip: string, cidr: string): boolean {
  const [net, bits] = cidr.split('/')
  const netFamily = isIP(net ?? '')
  if (netFamily === 0) return false
  const list = new BlockList()
  list.addSubnet(net!, Number(bits ?? (netFamily === 4 ? 32 : 128)), netFamily === 4 ? 'ipv4' : 'ipv6')
  const v4 = embeddedIpv4(ip)
  return [ip.replace(/%.*$/, ''), ...(v4 === null ? [] : [v4])].some((a) => isIP(a) === netFamily && list.check(a, netFamily === 4 ? 'ipv4' : 'ipv6'))
}

/**
 * Cloud metadata services: they answer with the host's own credentials. A CIDR opens one only
 * when it names exactly that address (169.254.169.254/32), never as part of a wider range (the
 * AWS IPv6 one lies in fc00::/7, Alibaba's in 100.64.0.0/10).
 */
const METADATA = ['169.254.169.254', '169.254.170.2', 'fd00:ec2::254', '100.100.100.200'].map(canonical)

/**
 * What a boolean "allow private" setting (1/true, kept from before the settings took CIDRs) opens:
 * loopback and the private ranges, for a receiver or server on the same machine or network. Not
 * link-local, the metadata addresses, nor the host's other addresses.
 */
export const LOOPBACK_AND_PRIVATE: readonly string[] = ['127.0.0.0/8', '::1/128', ...PRIVATE.map(([cidr]) => cidr)]

/** The CIDRs of non-public addresses a deployment lets one outbound path open; empty: none. */
export type PrivatePolicy = readonly string[]

const fullLength = (cidr: string) => {
  const [net, bits] = cidr.split('/')
  return bits === undefined || Number(bits) === (isIP(net ?? '') === 4 ? 32 : 128)
}

/** Whether `cidr` lies wholly inside `range`: 127.0.0.1/32 inside 127.0.0.0/8, 0.0.0.0/0 not. */
function within(cidr: string, range: string): boolean {
  const [net, bits] = cidr.split('/') as [string, string | undefined]
  const [rangeNet, rangeBits] = range.split('/') as [string, string]
  const width = Number(bits ?? (isIP(net) === 4 ? 32 : 128))
  return isIP(net) === isIP(rangeNet) && width >= Number(rangeBits) && inCidr(net, range)
}

/**
 * Why `ip` may not be connected to when the deployment allows the CIDRs `allowed`, or null when it
 * may. A listed CIDR opens the private addresses it covers; it opens a loopback, link-local or
 * other never-reachable address only when it lies inside that range (127.0.0.1/32 opens loopback,
 * 0.0.0.0/0 does not), the host's own address or a metadata address only when it names exactly it.
 */
export function addressRefusal(ip: string, allowed: PrivatePolicy = []): string | null {
  // Remembered until the host's own addresses are read again (the only other input): a model
  // call asks three times (about 0.1 ms each: every range's BlockList check makes an address).
  const own = hostOwnAddresses()
  if (verdicts.own !== own || verdicts.map.size >= MAX_VERDICTS) verdicts = { own, map: new Map() }
  const key = `${ip} ${allowed.join(' ')}`
  const known = verdicts.map.get(key)
  if (known !== undefined) return known
  const verdict = judge(ip, allowed)
  verdicts.map.set(key, verdict)
  return verdict
}
/** Verdicts by address and policy, for one reading of the host's own addresses. */
let verdicts: { own: Set<string> | null; map: Map<string, string | null> } = { own: null, map: new Map() }
/** Past this many (an egress proxy seeing many addresses), they are forgotten and judged afresh. */
const MAX_VERDICTS = 4096

function judge(ip: string, allowed: PrivatePolicy): string | null {
  const c = classifyAddress(ip)
  if (c === null) return null
  if (isIP(ip) === 0) return c.kind
  const v4 = embeddedIpv4(ip)
  const addrs = [canonical(ip.replace(/%.*$/, '')), ...(v4 === null ? [] : [v4])]
  // An IPv6 address that is nothing but a carrier (mapped, NAT64, 6to4...) reaches the IPv4 address
  // it carries: only a CIDR covering that opens it (::/0 covers 64:ff9b::10.0.0.1, but names no IPv4).
  const carrier = v4 !== null && !V6_LISTS.some((r) => r.list.check(addrs[0]!, 'ipv6'))
  const covering = allowed.filter((cidr) => inCidr(carrier ? v4 : ip, cidr))
  if (addrs.some((a) => METADATA.includes(a))) return covering.some(fullLength) ? null : c.kind
  if (c.reach === 'private') return covering.length > 0 ? null : c.kind
  // The range it is refused for, found as classifyAddress does: the address itself before the IPv4 it carries.
  const sameFamily = (a: string, cidr: string) => isIP(a) === isIP(cidr.split('/')[0]!) && inCidr(a, cidr)
  const range = addrs.map((a) => NEVER.find(([cidr]) => sameFamily(a, cidr))?.[0]).find((r) => r !== undefined)
  const opens = range === undefined ? covering.some(fullLength) : covering.some((cidr) => within(cidr, range))
  return opens ? null : c.kind
}
