import type { AddressInfo } from 'node:net'
import path from 'node:path'
import type { FastifyInstance } from 'fastify'
import { buildApp } from './app.ts'
import { settleListenPort, type Config } from './config.ts'
import { currentSchema, openStore } from './db/database.ts'
import { memoryEventBus } from './events/event-bus.ts'
import { pgEventBus } from './events/pg-event-bus.ts'
import { deploymentBox } from './shared/encryption-key.ts'
import { purgeIdempotencyKeys } from './http/idempotency.ts'
import { createLocalProvider } from './sandbox/local/create-local.ts'
import type { HostReport } from './sandbox/sandbox.ts'
import { workspaceManager } from './workspaces/workspace-manager.ts'
import { turnRunner } from './runner/turn-runner.ts'
import { deliveryWorker } from './webhooks/delivery-worker.ts'
import { localBlobStore } from './artifacts/blob-store.ts'
import { publishPending } from './artifacts/publisher.ts'
import { publishTurn } from './artifacts/publish-turn.ts'
import { unavailableNetworkTools } from './tools/network/index.ts'

/** Says plainly, at start, what this host allows the sandboxes and what is missing. */
function reportHost(r: HostReport): void {
  const lines = [`warren: sandbox provider "${r.provider}"`, ...r.available.map((l) => `  ok: ${l}`), ...r.missing.map((l) => `  MISSING: ${l}`)]
  process.stderr.write(lines.join('\n') + '\n')
}

/** Opens the store, builds the app and listens; returns the app so the caller can close it. */
export async function startServer(config: Config): Promise<FastifyInstance> {
  const store = await openStore({ dataDir: config.dataDir, databaseUrl: config.databaseUrl })
  // Several processes on one PostgreSQL wake each other's streams and workers through it.
  const bus = config.databaseUrl ? await pgEventBus(config.databaseUrl, await currentSchema(store)) : memoryEventBus()
  const box = deploymentBox(config)
  const provider = await createLocalProvider({ workspaceRoot: path.join(config.dataDir, 'workspaces'), prefix: config.sandboxPrefix, allowPrivate: config.sandboxAllowPrivate })
  reportHost(provider.report())
  for (const [type, why] of unavailableNetworkTools(config)) process.stderr.write(`warren: tool ${type} is not offered: ${why}\n`)
  const workspaces = workspaceManager({ store, bus, config, box, provider })
  await workspaces.recover()
  const blobs = localBlobStore(path.join(config.dataDir, 'artifacts'))
  const publishing = { store, bus, workspaces, blobs }
  const runner = turnRunner({ store, bus, config, box, workspaces, publish: (turn) => publishTurn(publishing, turn) })
  const app = await buildApp({
    runner,
    blobs,
    config,
    store,
    bus,
    box,
    workspaces,
    logger: { level: config.logLevel, redact: ['req.headers.authorization'] },
  })
  const webhooks = deliveryWorker({ store, bus, config, box })
  const purge = setInterval(() => void purgeIdempotencyKeys(store).catch(() => {}), 3_600_000)
  purge.unref()
  app.addHook('onClose', async () => {
    clearInterval(purge)
    await webhooks.close()
    await runner.close()
    await workspaces.close()
    await bus.close()
    await store.close()
  })
  await app.listen({ host: config.host, port: config.port })
  settleListenPort(config, (app.server.address() as AddressInfo).port)
  // Files of turns that settled before a stop, before any queued turn may change them.
  await publishPending(publishing)
  // Turns that were working when the service stopped go on once it can answer for them.
  await runner.recover()
  // Deliveries owed from before a stop (or enqueued by another process) go out from here on.
  webhooks.start()
  return app
}
