import { after, before, describe } from 'node:test'
import fs from 'node:fs'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import type { FastifyInstance, FastifyServerOptions, InjectOptions, LightMyRequestResponse } from 'fastify'
import { assemble } from '../src/assemble.ts'
import { loadConfig, settleListenPort, type Config } from '../src/config.ts'
import type { DialectName, Store } from '../src/db/database.ts'
import type { EventBus } from '../src/events/event-bus.ts'
import { secretBox, type SecretBox } from '../src/shared/secret-box.ts'
import type { WorkspaceManager } from '../src/workspaces/workspace-manager.ts'
import type { TurnRunner } from '../src/runner/turn-runner.ts'
import type { ServiceNode } from '../src/nodes/node.ts'
import type { Metrics } from '../src/shared/metrics.ts'
import type { WorkspaceSnapshots } from '../src/workspaces/workspace-snapshots.ts'
import type { ArtifactLimits } from '../src/artifacts/publish-turn.ts'
import { randomText } from '../src/shared/ids.ts'
import { PROVIDER_KINDS, type ProviderRegistry } from '../src/sandbox/providers.ts'
import { localKind } from '../src/sandbox/local/local-kind.ts'
import type { SandboxProvider } from '../src/sandbox/sandbox.ts'
import { ensureOrg, insertToken } from '../src/tokens/tokens.store.ts'
import { SCOPES, type Scope } from '../src/tokens/scopes.ts'

/** Where tests' fake model servers live (127.0.0.1), as a deployment would list a self-hosted one. */
export const TEST_MODEL_ALLOW_PRIVATE = '127.0.0.1/32'

export const PG_URL = process.env.WARREN_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'

let pgAvailable: Promise<string | null> | undefined
/** null when PostgreSQL answers; otherwise why it does not. */
function checkPostgres(): Promise<string | null> {
  pgAvailable ??= (async () => {
    const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2000 })
    try {
      await c.connect()
      await c.query('select 1')
      return null
    } catch (err) {
      return (err as Error).message
    } finally {
      await c.end().catch(() => {})
    }
  })()
  return pgAvailable
}

const wantedDialects = (): DialectName[] => {
  const only = process.env.WARREN_TEST_DIALECTS
  return only ? (only.split(',') as DialectName[]) : ['sqlite', 'postgres']
}

// Asked once, before any suite is declared: node:test files suites that resume after an await
// under whichever suite is current then, so two async describes in one file would mix their tests.
const postgresUnavailable: string | null = wantedDialects().includes('postgres') ? await checkPostgres() : null

/**
 * Runs `suite` once per dialect. PostgreSQL runs wherever a server answers at PG_URL; where none
 * does, the suite says why it skipped, and under CI=true that is a failure instead.
 */
export function forEachDialect(name: string, suite: (dialect: DialectName) => void): void {
  for (const dialect of wantedDialects()) {
    if (dialect === 'sqlite') describe(`${name} [sqlite]`, () => suite('sqlite'))
    else onPostgres(name, () => suite('postgres'))
  }
}

/** Runs `suite` on PostgreSQL only (what concerns several processes on one store), under the same rules. */
export function onPostgres(name: string, suite: () => void): void {
  if (!wantedDialects().includes('postgres')) return
  describe(`${name} [postgres]`, () => {
    const why = postgresUnavailable
    if (why !== null) {
      if (process.env.CI) throw new Error(`PostgreSQL is required in CI but ${PG_URL} did not answer: ${why}`)
      process.stdout.write(`# SKIPPED ${name} [postgres]: no PostgreSQL at ${PG_URL} (${why})\n`)
      return
    }
    suite()
  })
}

export type Warren = {
  app: FastifyInstance
  store: Store
  bus: EventBus
  config: Config
  /** Seals secrets at rest, with this instance's key. */
  box: SecretBox
  dialect: DialectName
  /** The data directory (SQLite file, workspaces). */
  dataDir: string
  /** PostgreSQL only: the schema this instance lives in (undefined on SQLite). */
  pgSchema: string | undefined
  /** A token with every scope in a fresh organization. */
  token: string
  orgId: string
  /** app.inject with the default token unless `token: null` or another token is given. */
  inject(opts: InjectOptions & { token?: string | null }): Promise<LightMyRequestResponse>
  workspaces: WorkspaceManager
  runner: TurnRunner
  node: ServiceNode
  /** The sandbox provider the instance's workspaces run on (its kind chosen by WARREN_SANDBOX_PROVIDER). */
  provider: SandboxProvider
  metrics: Metrics
  /** The metrics' own listener (WARREN_METRICS_PORT set), as a base URL; null when they are on the main one. */
  metricsUrl: string | null
  snapshots: WorkspaceSnapshots
  /** Mints a token in the named organization (created when missing). */
  mint(org?: string, scopes?: Scope[], days?: number): Promise<{ token: string; id: string; orgId: string }>
  /** Listens on a loopback port and returns the base URL (for real sockets). */
  listen(): Promise<string>
  close(): Promise<void>
}

export type StartOptions = {
  env?: Record<string, string>
  config?: Partial<Config>
  /** Use this data directory instead of a fresh one; it is left in place on close. */
  dataDir?: string
  /** Names the sandboxes' host resources; a second instance given the same one treats the first's as orphans (a restart). */
  sandboxPrefix?: string
  /** PostgreSQL schema to reuse (a restart on the same store); it is left in place on close. */
  pgSchema?: string
  /** Kinds of sandbox provider besides (or in place of) the harness's own `local`, chosen by WARREN_SANDBOX_PROVIDER. */
  providers?: ProviderRegistry
  /** Artifact ceilings in place of the specification's 200 / 500 MiB, so tests need not write that much. */
  artifactLimits?: ArtifactLimits
  /**
   * false: the delivery worker stays stopped, for tests that drive deliveries themselves (workers
   * of their own trusting their receiver, rows written by hand), which a running one would race.
   */
  deliveries?: boolean
  /** A certificate the delivery worker trusts (a test receiver's, self-signed). */
  webhookCa?: string
  /** The service's logger (Fastify's pino options); none otherwise. */
  logger?: FastifyServerOptions['logger']
}

/** Starts the real app on a fresh store of the given dialect. */
export async function startWarren(dialect: DialectName, opts: StartOptions = {}): Promise<Warren> {
  const dataDir = opts.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'warren-test-'))
  const pgSchema = opts.pgSchema ?? `t_${randomText(12)}`
  // Each instance takes its own /16 of workspace addresses: nodes on one store and host never share one.
  const subnet = `10.${100 + Math.floor(Math.random() * 100)}.0.0/16`
  // Metrics on the main listener, where inject reaches them; the default port would be shared by every instance.
  // The fake model servers listen on 127.0.0.1, which the outbound policy opens only when listed.
  const config = loadConfig({ PORT: '0', WARREN_DATA_DIR: dataDir, WARREN_SANDBOX_SUBNET: subnet, WARREN_METRICS_PORT: 'main', WARREN_MODEL_ALLOW_PRIVATE: TEST_MODEL_ALLOW_PRIVATE, ...(dialect === 'postgres' ? { DATABASE_URL: PG_URL } : {}), ...opts.env }, opts.config)
  const service = await assemble(config, {
    pgSchema: dialect === 'postgres' ? pgSchema : undefined,
    // Each instance names its host resources apart, so parallel test files never clean up each other's.
    providers: { ...PROVIDER_KINDS, local: localKind({ prefix: opts.sandboxPrefix ?? `t${randomText(4)}`, uidBase: 300_000 + Math.floor(Math.random() * 600) * 1000, uidCount: 1000 }), ...opts.providers },
    artifactLimits: opts.artifactLimits,
    box: secretBox(Buffer.alloc(32, 7)),
    logger: opts.logger ?? false,
    deliveries: opts.deliveries,
    webhookCa: opts.webhookCa,
  })
  await service.start()
  const { app, store, bus, box, workspaces, runner, node, snapshots, provider } = service
  const mint: Warren['mint'] = async (org = `org-${randomText(8)}`, scopes = [...SCOPES], days = 30) => {
    const o = await ensureOrg(store.db, org)
    const { record, secret } = await insertToken(store.db, { orgId: o.id, name: null, scopes, days })
    return { token: secret, id: record.id, orgId: o.id }
  }
  const first = await mint()
  const w: Warren = {
    app,
    store,
    bus,
    config,
    box,
    dialect,
    dataDir,
    pgSchema: dialect === 'postgres' ? pgSchema : undefined,
    token: first.token,
    orgId: first.orgId,
    inject: ({ token, headers, ...rest }) => {
      const tok = token === undefined ? first.token : token
      return app.inject({ ...rest, headers: { ...(tok ? { authorization: `Bearer ${tok}` } : {}), ...headers } })
    },
    mint,
    workspaces,
    provider,
    runner,
    node,
    metrics: service.metrics,
    metricsUrl: service.metricsListener ? `http://127.0.0.1:${service.metricsListener.address.port}` : null,
    snapshots,
    listen: async () => {
      const address = await app.listen({ host: '127.0.0.1', port: 0 })
      settleListenPort(config, (app.server.address() as AddressInfo).port)
      await node.advertise(address)
      return address
    },
    close: async () => {
      await service.close()
      if (dialect === 'postgres' && !opts.pgSchema) {
        const c = new pg.Client({ connectionString: PG_URL })
        await c.connect()
        await c.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`)
        await c.end()
      }
      if (!opts.dataDir) fs.rmSync(dataDir, { recursive: true, force: true })
    },
  }
  return w
}

/** One Warren per describe block: started before its tests, closed after. */
export function useWarren(dialect: DialectName, opts: StartOptions = {}): () => Warren {
  let w: Warren | undefined
  before(async () => {
    w = await startWarren(dialect, opts)
  })
  after(async () => {
    await w?.close()
  })
  return () => {
    if (!w) throw new Error('Warren not started yet')
    return w
  }
}

/** The error body of a refusal, asserting its shape and that request_id matches the header. */
export function errorOf(res: LightMyRequestResponse): { code: string; message: string; request_id: string } {
  const body = res.json() as { error: { code: string; message: string; request_id: string } }
  if (Object.keys(body).length !== 1 || !body.error) throw new Error(`not an error body: ${res.body}`)
  if (body.error.request_id !== res.headers['x-request-id']) throw new Error('error.request_id differs from x-request-id')
  return body.error
}
