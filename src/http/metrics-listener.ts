import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Config } from '../config.ts'
import { METRICS_PATH, type Metrics } from '../shared/metrics.ts'
import type { Log } from '../shared/log.ts'
import { newRequestId } from './error-handler.ts'

export type MetricsListener = { address: AddressInfo; close(): Promise<void> }

/**
 * GET /metrics on an address of its own (WARREN_METRICS_PORT), apart from the API: a scraper can be
 * let in there while the API's port stays public, or the other way round. It answers nothing else;
 * refusals keep the API's error shape. Null when WARREN_METRICS_PORT=main (the main listener
 * serves the metrics then).
 */
export async function listenMetrics(metrics: Metrics, config: Pick<Config, 'metricsHost' | 'metricsPort'>, log: Log): Promise<MetricsListener | null> {
  const { metricsHost: host, metricsPort: port } = config
  if (port === undefined) return null
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0]
    const refuse = (status: number, code: string, message: string) => {
      const requestId = newRequestId()
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'x-request-id': requestId })
      res.end(JSON.stringify({ error: { code, message, request_id: requestId } }))
    }
    if (path !== METRICS_PATH) return refuse(404, 'not_found', `This listener serves GET ${METRICS_PATH} only.`)
    if (req.method !== 'GET' && req.method !== 'HEAD') return refuse(404, 'not_found', `Route ${req.method} ${METRICS_PATH} not found: it answers GET.`)
    metrics.text().then(
      (text) => {
        res.writeHead(200, { 'content-type': metrics.contentType })
        res.end(req.method === 'HEAD' ? undefined : text)
      },
      (err: unknown) => {
        log.error({ err, component: 'metrics' }, 'the metrics could not be collected')
        refuse(500, 'internal_error', 'The metrics could not be collected.')
      },
    )
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        new Error(`the metrics listener cannot listen on ${host}:${port} (${err.code ?? err.message}): set WARREN_METRICS_PORT to a free port (each node on a host its own), or to "main" to serve /metrics on the main listener`, { cause: err }),
      ),
    )
    server.listen(port, host, () => {
      server.removeAllListeners('error')
      resolve()
    })
  })
  const address = server.address() as AddressInfo
  log.info({ component: 'metrics', url: `http://${host.includes(':') ? `[${host}]` : host}:${address.port}${METRICS_PATH}` }, 'metrics served on their own listener')
  return {
    address,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}
