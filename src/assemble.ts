import type { AddressInfo } from 'node:net'
import type { FastifyInstance, FastifyServerOptions } from 'fastify'
import { buildApp } from './app.ts'
import { reachableHost, settleListenPort, type Config } from './config.ts'
import { currentSchema, openStore, type Store } from './db/database.ts'
import { memoryEventBus, type EventBus } from './events/event-bus.ts'
import { pgEventBus } from './events/pg-event-bus.ts'
import { deploymentBox } from './shared/encryption-key.ts'
import type { SecretBox } from './shared/secret-box.ts'
import { logFailure, type Log } from './shared/log.ts'
import { purgeIdempotencyKeys } from './http/idempotency.ts'
import { configureProvider, type ProviderRegistry } from './sandbox/providers.ts'
import type { SandboxProvider } from './sandbox/sandbox.ts'
import { workspaceManager, type WorkspaceManager } from './workspaces/workspace-manager.ts'
import { turnRunner, type TurnRunner } from './runner/turn-runner.ts'
import { deliveryWorker, type DeliveryWorker } from './webhooks/delivery-worker.ts'
import type { BlobStore } from './artifacts/blob-store.ts'
import { pickBlobStore } from './artifacts/database-blob-store.ts'
import { workspaceSnapshots, type WorkspaceSnapshots } from './workspaces/workspace-snapshots.ts'
import { publishPending } from './artifacts/publisher.ts'
import { MIB } from './http/limits.ts'
import { MAX_ARTIFACT_BYTES, publishTurn, type ArtifactLimits } from './artifacts/publish-turn.ts'
import { serviceNode, type ServiceNode } from './nodes/node.ts'
import { workingTurns } from './turns/turns.store.ts'
import { createMetrics, type Metrics } from './shared/metrics.ts'
import { countDeliveries, earliestPendingDue } from './webhooks/deliveries.store.ts'
import { countedProvider } from './sandbox/counted-provider.ts'
import { listenMetrics, type MetricsListener } from './http/metrics-listener.ts'
import { privateDataDir } from './shared/private-data-dir.ts'

const PURGE_EVERY_MS = 3_600_000

/** What a caller other than a deployment (tests, benches) sets instead of the configuration's choice. */
export type AssembleOverrides = {
  /** PostgreSQL schema of the store, created when missing (tests give each instance its own). */
  pgSchema?: string
  /**
   * Kinds of sandbox provider in place of the registry's (PROVIDER_KINDS), by name: the configured
   * kind (config.sandboxProvider) is looked up here. Tests give `local` a prefix and uids of its own.
   */
  providers?: ProviderRegistry
  /** Artifact ceilings in place of the specification's. */
  artifactLimits?: Partial<ArtifactLimits>
  /** Seals secrets at rest in place of the deployment's key. */
  box?: SecretBox
  /** Fastify's logger; the configured level (config.logLevel) otherwise. */
  logger?: FastifyServerOptions['logger']
  /** Certificates the delivery worker trusts besides the system's (tests' self-signed receivers). */
  webhookCa?: string
  /** false: start() leaves the delivery worker stopped, for a caller that drives deliveries itself. */
  deliveries?: boolean
}

export type StartOptions = {
  /** Where to listen; without it the app is made ready for inject() only. */
  listen?: { host: string; port: number }
}

/** The service, wired once: its parts, and the steps that start and stop them in order. */
export type Assembly = {
  app: FastifyInstance
  store: Store
  bus: EventBus
  box: SecretBox
  provider: SandboxProvider
  workspaces: WorkspaceManager
  runner: TurnRunner
  blobs: BlobStore
  /** Workspace copies every node reaches, for bringing a workspace back on another node. */
  snapshots: WorkspaceSnapshots
  webhooks: DeliveryWorker
  /** This process as a node of the store: the sessions it owns, its peers. */
  node: ServiceNode
  /** This node's metrics (GET /metrics); the lead's node code counts takeovers and names the node here. */
  metrics: Metrics
  /** Where the metrics' own listener answers once started (WARREN_METRICS_PORT); null when they are on the main one. */
  readonly metricsListener: MetricsListener | null
  /**
   * Joins the store's nodes, clears what a crash of this node left on the host, makes the app ready
   * (listening when asked), takes up the sessions owed to it (publishing what a stop left
   * unpublished, driving interrupted turns), then starts sending webhooks.
   */
  start(opts?: StartOptions): Promise<void>
  /** Closes the app and everything under it, the store last. */
  close(): Promise<void>
}

/**
 * Builds the service from its configuration: the store, the bus, sandboxes, workspaces, the turn
 * runner, the app, the delivery worker and the idempotency purge. The server, the test harness
 * and the benches all come through here, so what one runs the others run too.
 */
export async function assemble(config: Config, overrides: AssembleOverrides = {}): Promise<Assembly> {
  // Before anything is written there; said in the log once the app (and its logger) exists.
  const tightened = privateDataDir(config.dataDir)
  // Every part (bus, sandboxes and their egress proxy, runner, worker, previews) logs through the
  // app's pino logger; they are made before the app (it takes the runner), and a line said before
  // it exists is dropped (nothing runs until start()).
  let app: FastifyInstance | undefined
  const log: Log = {
    info: (obj, msg) => app?.log.info(obj, msg),
    warn: (obj, msg) => app?.log.warn(obj, msg),
    error: (obj, msg) => app?.log.error(obj, msg),
  }
  // The store's gauges are read at scrape time, once the store (below) is open.
  const metrics = createMetrics({ countDeliveries: (status) => countDeliveries(store.db, status), earliestPendingDue: () => earliestPendingDue(store.db) })
  // Chosen (and its settings checked) before the store opens: an unknown kind or a bad setting stops the start with nothing to close.
  const startProvider = configureProvider(config.sandboxProvider, { config, log, metrics }, overrides.providers)
  const store = await openStore({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, pgSchema: overrides.pgSchema, idleInTransactionMs: config.nodeLeaseMs })
  // Several processes on one PostgreSQL wake each other's streams and workers through it.
  const bus = config.databaseUrl ? await pgEventBus(config.databaseUrl, await currentSchema(store), log) : memoryEventBus()
  const box = overrides.box ?? deploymentBox(config)
  const provider = await startProvider()
  // The node joins with what its provider claims on this host, whatever kind of provider it is.
  const resources = { dataDir: config.dataDir, ...provider.claim }
  const blobs = pickBlobStore(store, config.dataDir, 'artifacts')
  const snapshots = workspaceSnapshots({ store, provider, blobs: pickBlobStore(store, config.dataDir, 'snapshots') })
  // Only several nodes need copies of workspaces: on SQLite the one process keeps its own files.
  let node: ServiceNode | undefined
  // Before the node joins there is nothing to act on; after, only while its leases hold.
  const leaseHeld = () => node?.holdsLeases() ?? true
  const workspaces = workspaceManager({
    store,
    bus,
    config,
    box,
    provider: countedProvider(provider, metrics),
    log,
    ...(config.databaseUrl ? { snapshots } : {}),
    leaseHeld,
    ownerElsewhere: (sessionId) => node?.ownerElsewhere(sessionId) ?? Promise.resolve(null),
  })
  const limits = { fileBytes: MAX_ARTIFACT_BYTES, turnBytes: config.artifactTurnBytes, orgBytes: config.artifactOrgBytes, ...overrides.artifactLimits }
  const publishing = { store, bus, workspaces, blobs, limits, log }
  // A settled turn's files were stored for other nodes before it settled (WorkspaceManager.keep).
  const runner = turnRunner({ store, bus, config, box, workspaces, metrics, log, publish: (turn, signal) => publishTurn(publishing, turn, signal),
    nodeId: () => node!.id,
    leaseHeld })
  node = serviceNode({
    store,
    bus,
    box,
    log,
    metrics,
    leaseMs: config.nodeLeaseMs,
    url: config.nodeUrl,
    resources,
    local: {
      kick: (id) => runner.kick(id),
      cancel: (id, turnId) => runner.cancel(id, turnId),
      async deleted(id) {
        runner.forget(id)
        await workspaces.destroy(id)
      },
      async adopt(id) {
        const live = await workspaces.adopt(id)
        // Files of turns that settled before a stop, before any queued turn may change them.
        await publishPending(publishing, id)
        const working = (await workingTurns(store.db, id)).length > 0
        if (working) runner.kick(id)
        return live || working
      },
      async abandon() {
        runner.abandon()
        await workspaces.abandon()
      },
    },
  })
  app = await buildApp({
    runner,
    blobs,
    config,
    store,
    bus,
    box,
    workspaces,
    node,
    metrics,
    host: () => provider.report(),
    log,
    logger: overrides.logger ?? { level: config.logLevel, redact: ['req.headers.authorization'] },
  })
  if (tightened.length > 0) app.log.warn({ component: 'store', paths: tightened }, 'the data folder was open to other users: made readable by the service\'s user alone')
  const webhooks = deliveryWorker({ store, bus, config, box, log, ...(overrides.webhookCa ? { ca: overrides.webhookCa } : {}) })
  let metricsListener: MetricsListener | null = null
  // What a node stopped half way left (a snapshot of a deleted session, bytes not yet released).
  const sweepSnapshots = () => void snapshots.sweep().catch((err) => log.warn({ err, component: 'workspaces' }, 'sweeping workspace snapshots failed'))
  const purge = setInterval(() => {
    void purgeIdempotencyKeys(store).catch(logFailure(log, 'purging expired idempotency keys failed', { component: 'store' }))
    sweepSnapshots()
  }, PURGE_EVERY_MS)
  purge.unref()
  app.addHook('onClose', async () => {
    clearInterval(purge)
    await metricsListener?.close()
    await webhooks.close()
    await runner.close()
    await workspaces.close()
    // Only now, with every workspace stopped and recorded: peers take its sessions from here.
    await node!.leave()
    await bus.close()
    await store.close()
  })

  return {
    app,
    store,
    bus,
    box,
    provider,
    workspaces,
    runner,
    blobs,
    snapshots,
    webhooks,
    node,
    metrics,
    get metricsListener() {
      return metricsListener
    },
    async start(opts = {}) {
      // Before anything touches the host: a node that would share it with a live one is refused.
      try {
        await node!.join()
        // Before the main listener: a metrics port taken stops the start with nothing served.
        metricsListener = await listenMetrics(metrics, config, log)
      } catch (err) {
        // Refused (or no metrics port): nothing of it may stay open (its store, its egress proxy).
        await app.close().catch(logFailure(log, 'closing after a refused start failed'))
        throw err
      }
      await workspaces.recover()
      let listening = ''
      if (opts.listen) {
        await app.listen(opts.listen)
        const { port } = app.server.address() as AddressInfo
        settleListenPort(config, port)
        listening = `http://${reachableHost(opts.listen.host)}:${port}`
      } else await app.ready()
      // Sessions of a crashed predecessor (or of nodes that died or stopped) are taken up once
      // this node can answer for them.
      await node!.started(listening)
      // Also at start: a deployment whose nodes restart more often than the purge runs still sweeps.
      sweepSnapshots()
      // Deliveries owed from before a stop (or enqueued by another process) go out from here on.
      if (overrides.deliveries !== false) webhooks.start()
    },
    close: () => app.close(),
  }
}
