import { BlockList, isIP } from 'node:net'
import { networkInterfaces } from 'node:os'
import { globMatch } from '../../shared/glob.ts'

/**
 * What the egress proxy will connect to. A domain on the allowlist is not enough: its address
 * must be public too, or `allowed.example` pointing at 127.0.0.1, a private range or the host
 * itself would open the service's own ports (PostgreSQL, Redis, the API) to the sandbox.
 */

function blockList(v4: string[], v6: string[]): BlockList {
  const list = new BlockList()
  for (const c of v4) list.addSubnet(c.split('/')[0], Number(c.split('/')[1]), 'ipv4')
  for (const c of v6) list.addSubnet(c.split('/')[0], Number(c.split('/')[1]), 'ipv6')
  return list
}

/** Never reachable through the proxy: loopback, unspecified, link-local, multicast, reserved. */
const NEVER = blockList(
  ['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'],
  ['::/128', '::1/128', 'fe80::/10', 'ff00::/8', '100::/64'],
)
/** Reachable only with allowPrivate: RFC 1918, CGNAT, IETF and benchmark ranges, unique local. */
const PRIVATE = blockList(
  ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '192.0.0.0/24', '198.18.0.0/15'],
  ['fc00::/7', 'fec0::/10', '64:ff9b:1::/48'],
)

/** The IPv4 address hidden in an IPv4-mapped (::ffff:a.b.c.d) or NAT64 (64:ff9b::/96) address. */
function embeddedV4(address: string): string | null {
  const groups = expandV6(address)
  if (!groups) return null
  const mapped = groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff
  const nat64 = groups[0] === 0x64 && groups[1] === 0xff9b && groups.slice(2, 6).every((g) => g === 0)
  if (!mapped && !nat64) return null
  return [groups[6] >> 8, groups[6] & 255, groups[7] >> 8, groups[7] & 255].join('.')
}

function expandV6(address: string): number[] | null {
  let text = address.toLowerCase()
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)
  if (dotted) {
    const p = dotted[1].split('.').map(Number)
    text = text.slice(0, -dotted[1].length) + `${((p[0] << 8) | p[1]).toString(16)}:${((p[2] << 8) | p[3]).toString(16)}`
  }
  const [head, tail] = text.split('::')
  const h = head ? head.split(':') : []
  const t = tail ? tail.split(':') : []
  const fill = text.includes('::') ? 8 - h.length - t.length : 0
  const groups = [...h, ...Array(fill).fill('0'), ...t].map((g) => parseInt(g, 16))
  return groups.length === 8 && groups.every((g) => g >= 0 && g <= 0xffff) ? groups : null
}

let localCache: { at: number; addrs: Set<string> } = { at: 0, addrs: new Set() }

/** The host's own addresses (re-read every 2 s: cheap, and interfaces come and go with sandboxes). */
function hostOwnAddresses(): Set<string> {
  const now = Date.now()
  if (now - localCache.at > 2000) {
    const addrs = new Set<string>()
    for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) addrs.add(a.address.toLowerCase())
    localCache = { at: now, addrs }
  }
  return localCache.addrs
}

export type PrivatePolicy = boolean | string[]

/** Why the proxy must not connect to `address`, or null when it may. */
export function addressRefusal(address: string, allowPrivate: PrivatePolicy = false): string | null {
  const family = isIP(address)
  if (family === 0) return 'not an IP address'
  const v4 = family === 4 ? address : embeddedV4(address)
  const type = v4 ? 'ipv4' : 'ipv6'
  const target = v4 ?? address
  if (NEVER.check(target, type)) return 'loopback, link-local, multicast or unspecified address'
  if (hostOwnAddresses().has(target.toLowerCase()) || hostOwnAddresses().has(address.toLowerCase())) {
    return "the host's own address"
  }
  if (PRIVATE.check(target, type)) {
    if (allowPrivate === true) return null
    if (Array.isArray(allowPrivate) && allowPrivate.some((c) => inCidrOf(target, type, c))) return null
    return 'private address'
  }
  return null
}

/** Whether an IP address lies in a CIDR (either family; IPv4 embedded in IPv6 counts as IPv4). */
export function inCidr(address: string, cidr: string): boolean {
  const family = isIP(address)
  if (family === 0) return false
  const v4 = family === 4 ? address : embeddedV4(address)
  return inCidrOf(v4 ?? address, v4 ? 'ipv4' : 'ipv6', cidr)
}

function inCidrOf(address: string, type: 'ipv4' | 'ipv6', cidr: string): boolean {
  const [net, len] = cidr.split('/')
  const netType = isIP(net) === 4 ? 'ipv4' : 'ipv6'
  if (netType !== type) return false
  const list = new BlockList()
  list.addSubnet(net, Number(len ?? (type === 'ipv4' ? 32 : 128)), netType)
  return list.check(address, type)
}

/**
 * A CONNECT authority or URL host, normalised (lower case, no trailing dot, no IPv6 brackets),
 * or null when it is not a syntactically valid host name or IP literal.
 */
export function normalizeHost(raw: string): string | null {
  let host = raw.toLowerCase()
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1)
  if (isIP(host)) return host
  if (host.endsWith('.')) host = host.slice(0, -1)
  if (host.length === 0 || host.length > 253) return null
  const labels = host.split('.')
  return labels.every((l) => /^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$/.test(l)) ? host : null
}

/**
 * `*` matches one label, `**` one or more, anything else must match exactly (case-insensitive).
 * A host any deny glob matches is refused whatever the allow list says.
 */
export function hostAllowed(host: string, allow: string[], deny: string[] = []): boolean {
  const matches = (pattern: string) => pattern.toLowerCase() === host || globMatch(pattern, host, '.', true)
  return !deny.some(matches) && allow.some(matches)
}
