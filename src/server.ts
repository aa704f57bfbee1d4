import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { Config } from './config.ts'
import { assemble } from './assemble.ts'
import type { HostReport } from './sandbox/sandbox.ts'
import { unavailableNetworkTools } from './tools/network/index.ts'
import { survivePlaywrightRejections } from './tools/browser/playwright-rejections.ts'
import { readableBrowserBinaries } from './tools/browser/browser-hub.ts'

/** Says plainly, at start, what this host allows the sandboxes and what is missing: one structured line each. */
function reportHost(log: FastifyBaseLogger, r: HostReport): void {
  for (const line of r.available) log.info({ component: 'sandbox', provider: r.provider }, `ok: ${line}`)
  for (const line of r.missing) log.warn({ component: 'sandbox', provider: r.provider }, `MISSING: ${line}`)
}

/** Assembles the service, reports what this host offers, and listens; returns the app so the caller can close it. */
export async function startServer(config: Config): Promise<FastifyInstance> {
  const service = await assemble(config)
  const log = service.app.log
  // The service's own process only: a test runner takes every unhandled rejection for a failure.
  survivePlaywrightRejections(log)
  reportHost(log, service.provider.report())
  const unavailable = unavailableNetworkTools(config)
  for (const [type, why] of unavailable) log.warn({ component: 'tools', tool: type }, `tool ${type} is not offered: ${why}`)
  if (!unavailable.has('browse')) {
    for (const bin of readableBrowserBinaries()) {
      log.warn({ component: 'tools', tool: 'browse', path: bin }, `${bin} is readable by every user: a workspace can ptrace its browser and write what it says to the service (scripts/setup.sh makes it 0711 with dpkg-statoverride)`)
    }
  }
  await service.start({ listen: { host: config.host, port: config.port } })
  return service.app
}
