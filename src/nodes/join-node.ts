import os from 'node:os'
import type { Store } from '../db/database.ts'
import { newId } from '../shared/ids.ts'
import type { HostClaim } from '../sandbox/sandbox.ts'
import { resourcesOverlap } from './resources-overlap.ts'
import { declareDead, insertNode, readNodes, type NodeRow } from './nodes.store.ts'

/**
 * What a node holds on its host, which no other live node on the same host may share: its data
 * folder and what its sandbox provider claims (SandboxProvider.claim).
 */
export type HostResources = HostClaim & { dataDir: string }

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

/** What `mine` would share with a live node's row on the same host, as sentences; empty: nothing. */
export function hostConflicts(row: NodeRow, mine: HostResources): string[] {
  // A row's empty subnet is a claim of none (the column predates providers that take none).
  const theirs = { prefix: row.sandbox_prefix, subnet: row.sandbox_subnet || null, uidBase: row.uid_base, uidCount: row.uid_count }
  const out = resourcesOverlap(theirs, mine)
  if (row.data_dir === mine.dataDir) out.push(`both use the data folder ${mine.dataDir}`)
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
export async function joinNode(store: Store, mine: HostResources, opts: { leaseMs: number; url: string; /** The node's secret, sealed. */ secret: string }): Promise<string> {
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
    if (conflicts.length) {
      throw new NodeRefused(
        `this node would share its host with the live node ${row.id} (pid ${row.pid}, ${row.url || 'no address yet'}): ${conflicts.join('; ')}. Give each node on a host its own WARREN_DATA_DIR, WARREN_SANDBOX_PREFIX, WARREN_SANDBOX_SUBNET and WARREN_SANDBOX_UID_BASE.`,
      )
    }
  }
  const id = newId('node')
  await insertNode(store.db, store.dialect, {
    id,
    host,
    pid: process.pid,
    url: opts.url,
    data_dir: mine.dataDir,
    sandbox_prefix: mine.prefix,
    sandbox_subnet: mine.subnet ?? '',
    uid_base: mine.uidBase,
    uid_count: mine.uidCount,
    secret: opts.secret,
  })
  return id
}
