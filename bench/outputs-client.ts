// The client side of bench/outputs' preview half, in its own process so that issuing requests
// never shares the service's event loop (the proxy's). Told what to do over IPC by
// bench/outputs.ts; answers with its figures.
import http from 'node:http'

/** Where to send: an address, and the Host to name (the preview's, or none for the direct path). */
type Target = { host: string; port: number; hostHeader?: string; path: string }
type Job =
  | { kind: 'latency'; target: Target; warmup: number; count: number }
  | { kind: 'throughput'; target: Target; connections: number; warmupMs: number; ms: number }

/** One GET through `agent`, resolved with its status once the whole body has arrived. */
function get(agent: http.Agent, t: Target, sockets: Set<unknown>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: t.host, port: t.port, path: t.path, agent, headers: t.hostHeader ? { host: t.hostHeader } : {} }, (res) => {
      res.on('data', () => {})
      res.on('end', () => resolve(res.statusCode!))
      res.on('error', reject)
    })
    req.once('socket', (s) => sockets.add(s))
    req.on('error', reject)
    req.end()
  })
}

const ok = (status: number) => {
  if (status !== 200) throw new Error(`answered ${status}`)
}

process.on('message', async (job: Job) => {
  try {
    if (job.kind === 'latency') {
      // One keep-alive connection, one request at a time.
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
      const sockets = new Set<unknown>()
      for (let i = 0; i < job.warmup; i++) ok(await get(agent, job.target, sockets))
      const latencies: number[] = []
      for (let i = 0; i < job.count; i++) {
        const t = performance.now()
        ok(await get(agent, job.target, sockets))
        latencies.push(performance.now() - t)
      }
      agent.destroy()
      process.send!({ kind: 'latency', latencies, sockets: sockets.size })
      return
    }
    // `connections` loops over as many keep-alive sockets, each one request at a time; only the
    // requests completed after the warm-up are counted.
    const agent = new http.Agent({ keepAlive: true, maxSockets: job.connections })
    const sockets = new Set<unknown>()
    const start = performance.now()
    const from = start + job.warmupMs
    const until = from + job.ms
    let counted = 0
    let total = 0
    await Promise.all(
      Array.from({ length: job.connections }, async () => {
        while (performance.now() < until) {
          ok(await get(agent, job.target, sockets))
          total++
          if (performance.now() >= from) counted++
        }
      }),
    )
    const ms = performance.now() - from
    agent.destroy()
    process.send!({ kind: 'throughput', requests: counted, total, ms, sockets: sockets.size })
  } catch (err) {
    process.send!({ kind: 'error', message: (err as Error).stack ?? String(err) })
  }
})
