// Several `warren serve` child processes on ONE PostgreSQL schema: the nodes of one service, each
// with its own data folder, sandbox prefix, subnet and uid range, sharing the store and the
// encryption key, the way issue 15 says a deployment runs them. A client spreads requests
// round-robin over the live nodes; a test kills and restarts nodes by index.
import { removeDataDir } from './left-on-host.ts'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { PG_URL } from './harness.ts'
import { serviceProcess, type ApiResponse, type Exit, type ServiceProcess } from './service-process.ts'

/** How long a node's heartbeat may lapse before it is declared dead (WARREN_NODE_LEASE_MS), in tests. */
export const NODE_LEASE_MS = 3000

export type ClusterOptions = {
  /** How many nodes the cluster has (each gets its own data folder, prefix, subnet and uid range). */
  nodes: number
  /** Which nodes startCluster starts; the others wait for start(i). Default: all of them. */
  start?: number[]
  /** Added to every node's environment (after the cluster's own, so a test may override any). */
  env?: Record<string, string>
}

export type ClusterNode = {
  readonly index: number
  readonly service: ServiceProcess
  /** What this node was started with: its own share of the host and the cluster's shared settings. */
  readonly env: Record<string, string>
  readonly dataDir: string
  readonly prefix: string
  readonly subnet: string
  readonly uidBase: number
}

export type Cluster = {
  readonly nodes: ClusterNode[]
  /** The PostgreSQL schema every node lives in. */
  readonly schema: string
  /** The DATABASE_URL every node is given (search_path set to the schema). */
  readonly databaseUrl: string
  /** A token with every scope in the cluster's organization. */
  token: string
  /** Indexes of the nodes running now. */
  live(): number[]
  /** One request to the next live node, round-robin; `token` defaults to the cluster's. */
  api(method: string, url: string, body?: unknown, token?: string): Promise<ApiResponse & { node: number }>
  /** One request to node `i`. */
  on(i: number, method: string, url: string, body?: unknown, token?: string): Promise<ApiResponse>
  /** Starts node `i` and resolves once it listens. */
  start(i: number): Promise<void>
  /** Sends `signal` to node `i` and waits for it to end (SIGKILL after 20 s of anything else). */
  kill(i: number, signal: NodeJS.Signals): Promise<Exit>
  /** Stops node `i` if it runs (SIGTERM), then starts it again on the same data folder and prefix. */
  restart(i: number): Promise<void>
  /** Rows of a query on the cluster's schema (what a test checks that no route shows). */
  query<R extends Record<string, unknown>>(sql: string, params?: unknown[]): Promise<R[]>
  /** Stops every node, removes what killed nodes left on the host, drops the schema and the data folders. */
  close(): Promise<void>
}

const LETTERS = 'abcdefghijklmnopqrstuvwxyz0123456789'
/** Second octets of sandbox subnets: 10.2NN.0.0/16, never the single-node default 10.213. */
const OCTETS = Array.from({ length: 50 }, (_, k) => 200 + k).filter((o) => o !== 213)

/** Starts a cluster of `opts.nodes` nodes on a fresh schema; the caller closes it (`after(() => cluster.close())`). */
export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const run = Array.from(randomBytes(3), (b) => LETTERS[b % 26]).join('')
  const schema = `cl_${run}_${randomBytes(4).toString('hex')}`
  const admin = new pg.Client({ connectionString: PG_URL })
  await admin.connect()
  await admin.query(`CREATE SCHEMA "${schema}"`)
  const databaseUrl = `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}options=${encodeURIComponent(`-c search_path=${schema}`)}`
  const shared: Record<string, string> = {
    DATABASE_URL: databaseUrl,
    WARREN_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    WARREN_NODE_LEASE_MS: String(NODE_LEASE_MS),
    WARREN_LOG_LEVEL: 'warn',
    // The tests poll the nodes freely; the specification's 120 a minute would refuse them.
    WARREN_RATE_GENERAL_PER_MIN: '1000000',
    WARREN_RATE_SESSIONS_PER_MIN: '100000',
    // A failed fake-model call is retried at once rather than after seconds.
    WARREN_PROVIDER_RETRY_DELAYS_MS: '50,50',
  }
  // Distinct per node and per run: a random start in the octet list and in a wide uid span.
  const firstOctet = randomBytes(1)[0]! % OCTETS.length
  const firstUid = 1_000_000 + (randomBytes(2).readUInt16BE() % 1000) * 10_000 * 8
  const nodes: ClusterNode[] = Array.from({ length: opts.nodes }, (_, index) => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `warren-cluster-${index}-`))
    // 'c', the run's three letters, the node's index: five characters (a network prefix holds at most five).
    const prefix = `c${run}${index}`
    const subnet = `10.${OCTETS[(firstOctet + index) % OCTETS.length]}.0.0/16`
    const uidBase = firstUid + index * 10_000
    const env = { ...shared, WARREN_DATA_DIR: dataDir, WARREN_SANDBOX_PREFIX: prefix, WARREN_SANDBOX_SUBNET: subnet, WARREN_SANDBOX_UID_BASE: String(uidBase), PORT: '0', ...opts.env }
    return { index, service: serviceProcess(env), env, dataDir, prefix, subnet, uidBase }
  })
  /** Nodes that died without cleaning up: a start on the same prefix removes what they left. */
  const dirty = new Set<number>()
  let next = 0
  const node = (i: number): ClusterNode => {
    const n = nodes[i]
    assert.ok(n, `no node ${i} in a cluster of ${nodes.length}`)
    return n
  }

  const cluster: Cluster = {
    nodes,
    schema,
    databaseUrl,
    token: '',
    live: () => nodes.filter((n) => n.service.running).map((n) => n.index),
    async api(method, url, body, token) {
      const live = cluster.live()
      assert.ok(live.length > 0, 'no node of the cluster is running')
      const i = live[next++ % live.length]!
      return { ...(await node(i).service.api(method, url, body, token ?? cluster.token)), node: i }
    },
    on: (i, method, url, body, token) => node(i).service.api(method, url, body, token ?? cluster.token),
    async start(i) {
      await node(i).service.start()
      dirty.delete(i)
    },
    async kill(i, signal) {
      try {
        const ended = await node(i).service.stop(signal)
        if (signal === 'SIGKILL') dirty.add(i)
        return ended
      } catch (err) {
        dirty.add(i)
        throw err
      }
    },
    async restart(i) {
      if (node(i).service.running) await cluster.kill(i, 'SIGTERM')
      await cluster.start(i)
    },
    async query(sql, params = []) {
      return (await admin.query(sql.replaceAll('{schema}', `"${schema}"`), params)).rows
    },
    async close() {
      try {
        await Promise.allSettled(nodes.filter((n) => n.service.running).map((n) => cluster.kill(n.index, 'SIGTERM')))
        // What a SIGKILL left (cgroups, namespaces, the nftables table) goes with a start and a clean stop on its prefix.
        for (const i of [...dirty]) {
          await cluster.start(i).catch(() => {})
          if (node(i).service.running) await cluster.kill(i, 'SIGTERM').catch(() => {})
        }
      } finally {
        for (const n of nodes) if (n.service.running) await n.service.stop('SIGKILL').catch(() => {})
        await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {})
        await admin.end().catch(() => {})
        for (const n of nodes) removeDataDir(n.dataDir)
      }
    },
  }

  try {
    // The token is written to the shared store before any node runs, as an operator would mint it.
    cluster.token = await node(0).service.mint(`cluster-${run}`)
    for (const n of nodes) n.service.token = cluster.token
    for (const i of opts.start ?? nodes.map((n) => n.index)) await cluster.start(i)
  } catch (err) {
    await cluster.close()
    throw err
  }
  return cluster
}
