import type { FastifyInstance } from 'fastify'
import { buildApp } from './app.ts'
import type { Config } from './config.ts'
import { openStore } from './db/database.ts'
import { memoryEventBus } from './events/event-bus.ts'
import { loadEncryptionKey } from './shared/encryption-key.ts'
import { secretBox } from './shared/secret-box.ts'
import { purgeIdempotencyKeys } from './http/idempotency.ts'

/** Opens the store, builds the app and listens; returns the app so the caller can close it. */
export async function startServer(config: Config): Promise<FastifyInstance> {
  const store = await openStore({ dataDir: config.dataDir, databaseUrl: config.databaseUrl })
  const app = await buildApp({
    config,
    store,
    bus: memoryEventBus(),
    box: secretBox(loadEncryptionKey(config)),
    logger: { level: config.logLevel, redact: ['req.headers.authorization'] },
  })
  const purge = setInterval(() => void purgeIdempotencyKeys(store).catch(() => {}), 3_600_000)
  purge.unref()
  app.addHook('onClose', async () => {
    clearInterval(purge)
    await store.close()
  })
  await app.listen({ host: config.host, port: config.port })
  return app
}
