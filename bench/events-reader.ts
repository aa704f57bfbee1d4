// The client side of bench/events, in its own process so that parsing frames never shares the
// service's event loop. Told what to do over IPC by bench/events.ts; answers with its figures.
import http from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'

type Job =
  | { kind: 'replay'; url: string; token: string; expect: number }
  | { kind: 'fanout'; urls: { url: string; token: string }[]; expect: number }
  | { kind: 'receive'; cert: string; key: string; expect: number }

const now = () => performance.timeOrigin + performance.now()

/** Opens a stream and hands every complete frame's text to `onFrame`. */
function stream(url: string, token: string, headers: Record<string, string>, onFrame: (frame: string) => void): Promise<http.ClientRequest> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: { authorization: `Bearer ${token}`, ...headers }, agent: false }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`${url}: ${res.statusCode}`))
      res.setEncoding('utf8')
      let buf = ''
      res.on('data', (chunk: string) => {
        buf += chunk
        let at: number
        while ((at = buf.indexOf('\n\n')) >= 0) {
          onFrame(buf.slice(0, at))
          buf = buf.slice(at + 2)
        }
      })
      resolve(req)
    })
    req.on('error', reject)
  })
}

let receiver: https.Server | null = null
let receiving = { got: 0, first: 0, expect: 0 }

process.on('message', async (job: Job) => {
  if (job.kind === 'receive') {
    // A webhook receiver: answers 204 to every POST, and reports when `expect` have arrived.
    receiving = { got: 0, first: 0, expect: job.expect }
    if (!receiver) {
      receiver = https.createServer({ cert: job.cert, key: job.key, keepAliveTimeout: 30_000 }, (req, res) => {
        req.resume()
        req.on('end', () => {
          res.writeHead(204).end()
          const r = receiving
          if (r.got++ === 0) r.first = now()
          if (r.got === r.expect) process.send!({ kind: 'received', got: r.got, ms: now() - r.first })
        })
      })
      await new Promise<void>((ok) => receiver!.listen(0, '127.0.0.1', ok))
    }
    process.send!({ kind: 'listening', port: (receiver.address() as AddressInfo).port })
    return
  }
  if (job.kind === 'replay') {
    let got = 0
    const start = now()
    let done!: () => void
    const finished = new Promise<void>((r) => (done = r))
    const req = await stream(job.url, job.token, { 'last-event-id': '0' }, (f) => {
      if (f.startsWith('id: ') && ++got === job.expect) done()
    })
    await finished
    const ms = now() - start
    req.destroy()
    process.send!({ kind: 'replay', ms, got })
    return
  }
  const latencies: number[] = []
  let got = 0
  let done!: () => void
  const finished = new Promise<void>((r) => (done = r))
  const reqs = await Promise.all(
    job.urls.map(({ url, token }) =>
      stream(url, token, {}, (f) => {
        if (!f.startsWith('id: ') && !f.startsWith('event: ')) return
        // The writer stamped the text with its clock just before committing the event.
        const m = /"text":"fan-out ([0-9.]+)"/.exec(f)
        if (!m) return
        latencies.push(now() - Number(m[1]))
        if (++got === job.expect) done()
      }),
    ),
  )
  process.send!({ kind: 'ready' })
  await finished
  for (const r of reqs) r.destroy()
  process.send!({ kind: 'fanout', latencies })
})
