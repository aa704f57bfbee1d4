import { randomInt } from 'node:crypto'
import { run } from './net-exec.ts'

/**
 * Addressing: the pool (10.213.0.0/16 by default) is cut into /30s, one per sandbox: `.1` is the
 * host side of its veth, `.2` the sandbox side. A /30 keeps every sandbox on its own link, so
 * sandboxes share no subnet and cannot even ARP for one another.
 */
export type Slot = { index: number; hostAddr: string; sandboxAddr: string; cidr: string }
export type Pool = { base: number; slots: number }

export function ipToInt(ip: string): number {
  const parts = ip.split('.').map(Number)
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) {
    throw new Error(`not an IPv4 address: ${ip}`)
  }
  return ((parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]) >>> 0
}

export function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.')
}

export function parsePool(cidr: string): Pool {
  const [ip, lenText] = cidr.split('/')
  const len = Number(lenText)
  if (!Number.isInteger(len) || len < 8 || len > 30) throw new Error(`sandbox subnet must be /8 to /30: ${cidr}`)
  const mask = (0xffffffff << (32 - len)) >>> 0
  return { base: (ipToInt(ip) & mask) >>> 0, slots: 2 ** (30 - len) }
}

export function slotAt(pool: Pool, index: number): Slot {
  const net = pool.base + index * 4
  return { index, hostAddr: intToIp(net + 1), sandboxAddr: intToIp(net + 2), cidr: `${intToIp(net)}/30` }
}

/** IPv4 addresses configured in the root namespace, with their interface. */
export async function hostAddresses(): Promise<{ ifname: string; addr: number }[]> {
  const out = await run('ip', ['-o', '-4', 'addr', 'show'])
  const found: { ifname: string; addr: number }[] = []
  for (const line of out.split('\n')) {
    const m = /^\d+:\s+(\S+)\s+inet\s+([\d.]+)\//.exec(line)
    if (m) found.push({ ifname: m[1], addr: ipToInt(m[2]) })
  }
  return found
}

/** True when an address in the slot's /30 is configured on an interface other than `ifname`. */
export function slotClashes(pool: Pool, index: number, used: { ifname: string; addr: number }[], ifname?: string): boolean {
  const net = pool.base + index * 4
  return used.some((u) => u.ifname !== ifname && u.addr >= net && u.addr < net + 4)
}

/**
 * A random free slot. Random rather than sequential so that two processes allocating at the
 * same moment rarely pick the same /30; the caller re-checks after configuring the address.
 */
export function pickSlot(pool: Pool, used: { ifname: string; addr: number }[], taken: Set<number>): number {
  for (let attempt = 0; attempt < 64; attempt++) {
    const index = randomInt(pool.slots)
    if (!taken.has(index) && !slotClashes(pool, index, used)) return index
  }
  for (let index = 0; index < pool.slots; index++) {
    if (!taken.has(index) && !slotClashes(pool, index, used)) return index
  }
  throw new Error('sandbox address pool exhausted')
}
