import http from 'node:http'

export type LoadResult = { requests: number; errors: number; seconds: number; rps: number; p50: number; p99: number }

/**
 * Drives `connections` keep-alive connections, each sending its next request as soon as the
 * previous answer arrives, for `seconds`. Latencies are per request, in milliseconds.
 */
export async function load(opts: {
  url: string
  method?: string
  headers?: Record<string, string>
  body?: () => string
  connections: number
  seconds: number
  expect?: number
}): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: opts.connections })
  const target = new URL(opts.url)
  const latencies: number[] = []
  let errors = 0
  const deadline = performance.now() + opts.seconds * 1000
  const one = () =>
    new Promise<void>((resolve) => {
      const body = opts.body?.()
      const started = performance.now()
      const req = http.request(
        { agent, host: target.hostname, port: target.port, path: target.pathname + target.search, method: opts.method ?? 'GET', headers: { ...opts.headers, ...(body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {}) } },
        (res) => {
          res.resume()
          res.on('end', () => {
            if (res.statusCode !== (opts.expect ?? 200)) errors++
            latencies.push(performance.now() - started)
            resolve()
          })
        },
      )
      req.on('error', () => {
        errors++
        resolve()
      })
      req.end(body)
    })
  const start = performance.now()
  await Promise.all(
    Array.from({ length: opts.connections }, async () => {
      while (performance.now() < deadline) await one()
    }),
  )
  const seconds = (performance.now() - start) / 1000
  agent.destroy()
  latencies.sort((a, b) => a - b)
  const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((latencies.length * p) / 100))] ?? NaN
  return { requests: latencies.length, errors, seconds, rps: latencies.length / seconds, p50: pct(50), p99: pct(99) }
}

export const fmt = (r: LoadResult) => `${r.rps.toFixed(0).padStart(7)} req/s  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  (${r.requests} requests, ${r.errors} errors)`
