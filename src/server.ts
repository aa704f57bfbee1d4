import type { FastifyInstance } from 'fastify'
import type { Config } from './config.ts'
import { assemble } from './assemble.ts'
import type { HostReport } from './sandbox/sandbox.ts'
import { unavailableNetworkTools } from './tools/network/index.ts'

/** Says plainly, at start, what this host allows the sandboxes and what is missing. */
function reportHost(r: HostReport): void {
  const lines = [`warren: sandbox provider "${r.provider}"`, ...r.available.map((l) => `  ok: ${l}`), ...r.missing.map((l) => `  MISSING: ${l}`)]
  process.stderr.write(lines.join('\n') + '\n')
}

/** Assembles the service, reports what this host offers, and listens; returns the app so the caller can close it. */
export async function startServer(config: Config): Promise<FastifyInstance> {
  const service = await assemble(config)
  reportHost(service.provider.report())
  for (const [type, why] of unavailableNetworkTools(config)) process.stderr.write(`warren: tool ${type} is not offered: ${why}\n`)
  await service.start({ listen: { host: config.host, port: config.port } })
  return service.app
}
