import os from 'node:os'
import type { Store } from '../db/database.ts'
import { newId } from '../shared/ids.ts'
import { declareDead, insertNode, readNodes, type NodeRow } from './nodes.store.ts'

/** What a node holds on its host, which no other live node on the same host may share. */
export type HostResources = { dataDir: string; prefix: string; subnet: string; uidBase: number; uidCount: number }

/** The node's start was refused: another live node holds what it needs. */
export class NodeRefused extends Error {}

const pidAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

function ipv4ToInt(ip: string): number {
  return ip.split('.').reduce((n, part) => n * 256 + Number(part), 0)
}
function cidrRange(cidr: string): [number, number] {
  const [ip, len] = cidr.split('/')
  const size = 2 ** (32 - Number(len))
  const start = Math.floor(ipv4ToInt(ip!) / size) * size
  return [start, start + size - 1]
}

/** What `mine` would share with a live node's row on the same host, as sentences; empty: nothing. */
export function hostConflicts(row: NodeRow, mine: HostResources): string[] {
  const out: string[] = []
  if (row.data_dir === mine.dataDir) out.push(`the data folder ${mine.dataDir} (set WARREN_DATA_DIR)`)
  if (row.sandbox_prefix === mine.prefix) out.push(`the sandbox prefix "${mine.prefix}" (set WARREN_SANDBOX_PREFIX)`)
  const [a0, a1] = cidrRange(row.sandbox_subnet)
  const [b0, b1] = cidrRange(mine.subnet)
  if (a0 <= b1 && b0 <= a1) out.push(`addresses of ${mine.subnet}, overlapping its ${row.sandbox_subnet} (set WARREN_SANDBOX_SUBNET)`)
  if (row.uid_base < mine.uidBase + mine.uidCount && mine.uidBase < row.uid_base + row.uid_count) {
    out.push(`sandbox uids ${mine.uidBase}–${mine.uidBase + mine.uidCount - 1}, overlapping its ${row.uid_base}–${row.uid_base + row.uid_count - 1} (set WARREN_SANDBOX_UID_BASE)`)
  }
  return out
}

/**
 * Makes this process a node of the store: refuses when a live node on this host holds what it
 * needs (on SQLite: when any other process serves the store at all), declares its predecessors dead
 * at once (the same host and sandbox prefix, its process gone or this very one: a crash and a
 * restart; tests crash a service inside their own process), and writes
 * its heartbeat row. Run before anything touches the host (the start-up clean-up removes what
 * carries the node's prefix). Resolves with the node's id.
 */
export async function joinNode(store: Store, mine: HostResources, opts: { leaseMs: number; url: string }): Promise<string> {
  const host = os.hostname()
  const { now, nodes } = await readNodes(store.db, store.dialect)
  for (const row of nodes) {
    if (row.stopped_at !== null) continue
    const sameHost = row.host === host
    const predecessor = sameHost && row.sandbox_prefix === mine.prefix && (row.pid === process.pid || !pidAlive(row.pid))
    if (predecessor) {
      await declareDead(store.db, store.dialect, row.id, 0)
      continue
    }
    const fresh = now - row.heartbeat_at < opts.leaseMs
    const live = fresh || (sameHost && pidAlive(row.pid))
    if (!live) continue // lapsed: the takeover declares it dead and takes its sessions
    if (store.dialect === 'sqlite') {
      throw new NodeRefused(`another warren serve (pid ${row.pid} on ${row.host}, serving ${row.url || 'no address yet'}) already uses the SQLite store in ${row.data_dir}; one process serves a SQLite store (several nodes need PostgreSQL: set DATABASE_URL)`)
    }
    if (!sameHost) continue
    const conflicts = hostConflicts(row, mine)
    if (conflicts.length) throw new NodeRefused(`node ${row.id} (pid ${row.pid}, ${row.url || 'no address yet'}) on this host already uses ${conflicts.join('; ')}`)
  }
  const id = newId('node')
  await insertNode(store.db, store.dialect, {
    id,
    host,
    pid: process.pid,
    url: opts.url,
    data_dir: mine.dataDir,
    sandbox_prefix: mine.prefix,
    sandbox_subnet: mine.subnet,
    uid_base: mine.uidBase,
    uid_count: mine.uidCount,
  })
  return id
}
