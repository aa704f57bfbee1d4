import { ipv4CidrsOverlap, parseIpv4Cidr } from '../shared/ipv4-cidr.ts'
import type { HostClaim } from '../sandbox/sandbox.ts'

/**
 * The ways two nodes on one host would step on each other, one human-readable line each; empty
 * when they can run side by side. A shared prefix makes each one's start-up clean-up remove the
 * other's sandboxes; overlapping subnets hand out the same address twice; overlapping uid ranges
 * give two workspaces the same owner. A claim with no subnet (or no uids) shares none. Throws a
 * TypeError when a subnet is not an IPv4 CIDR.
 */
export function resourcesOverlap(a: HostClaim, b: HostClaim): string[] {
  const conflicts: string[] = []
  if (a.prefix === b.prefix) conflicts.push(`both use the sandbox prefix "${a.prefix}"`)
  const [netA, netB] = [a.subnet, b.subnet].map((s) => {
    if (s === null) return null
    const cidr = parseIpv4Cidr(s)
    if (!cidr) throw new TypeError(`not an IPv4 CIDR: ${s}`)
    return cidr
  })
  if (netA && netB && ipv4CidrsOverlap(netA, netB)) conflicts.push(`sandbox subnets ${a.subnet} and ${b.subnet} overlap`)
  const lastA = a.uidBase + a.uidCount - 1
  const lastB = b.uidBase + b.uidCount - 1
  if (a.uidCount > 0 && b.uidCount > 0 && a.uidBase <= lastB && b.uidBase <= lastA) {
    conflicts.push(`sandbox uid ranges ${a.uidBase}–${lastA} and ${b.uidBase}–${lastB} overlap`)
  }
  return conflicts
}
