import { isIPv4 } from 'node:net'

/** An IPv4 network as integers: its first address and its prefix length. */
export type Ipv4Cidr = { base: number; bits: number }

const toInt = (ip: string): number => ip.split('.').reduce((n, part) => n * 256 + Number(part), 0)

/** `a.b.c.d/n` read strictly (dotted quad, 0–32); null when it is not one. Host bits are kept: see ipv4NetworkProblem. */
export function parseIpv4Cidr(text: string): (Ipv4Cidr & { address: number }) | null {
  const m = /^([0-9.]+)\/(\d{1,2})$/.exec(text)
  if (!m || !isIPv4(m[1]!)) return null
  const bits = Number(m[2])
  if (bits > 32) return null
  const address = toInt(m[1]!)
  return { address, base: address - (address % 2 ** (32 - bits)), bits }
}

/**
 * Why `text` is not an IPv4 network of a prefix length within [minBits, maxBits] written with its
 * network address (10.213.0.0/16, not 10.213.4.0/16, whose meaning is ambiguous); null when it is.
 */
export function ipv4NetworkProblem(text: string, minBits: number, maxBits: number): string | null {
  const cidr = parseIpv4Cidr(text)
  if (!cidr) return 'is not an IPv4 CIDR (a.b.c.d/n)'
  if (cidr.bits < minBits || cidr.bits > maxBits) return `must be /${minBits} to /${maxBits}`
  if (cidr.address !== cidr.base) return `is not a network address (did you mean ${formatIpv4Cidr(cidr)}?)`
  return null
}

export function formatIpv4Cidr(cidr: Ipv4Cidr): string {
  const n = cidr.base
  return `${[Math.floor(n / 2 ** 24), Math.floor(n / 2 ** 16) % 256, Math.floor(n / 2 ** 8) % 256, n % 256].join('.')}/${cidr.bits}`
}

/** True when the two networks share an address: aligned blocks either nest or are apart. */
export function ipv4CidrsOverlap(a: Ipv4Cidr, b: Ipv4Cidr): boolean {
  const wider = a.bits <= b.bits ? a : b
  const narrower = wider === a ? b : a
  return narrower.base - (narrower.base % 2 ** (32 - wider.bits)) === wider.base
}
