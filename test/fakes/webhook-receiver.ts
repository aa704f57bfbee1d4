import https from 'node:https'
import type http from 'node:http'
import type { AddressInfo } from 'node:net'
import { waitFor } from '../fixtures.ts'

/** One request as it arrived: the raw body text, exactly as signed. */
export type Received = { path: string; headers: http.IncomingHttpHeaders; body: string; at: number }

/** A status to answer with, or `hang`: keep the request open until released or the receiver closes. */
export type Answer = number | 'hang'

export type WebhookReceiver = {
  port: number
  /** `https://{host}:{port}{path}`; host defaults to localhost. */
  url(path: string, host?: string): string
  /** Requests received at `path`, in arrival order. */
  received(path: string): Received[]
  /** How the n-th request at `path` is answered (the last answer repeats); unscripted paths answer 200. */
  script(path: string, answers: Answer[]): void
  /** Resolves with the requests at `path` once there are at least `count`. */
  waitFor(path: string, count: number, ms?: number): Promise<Received[]>
  /** Requests at `path` still held open. */
  held(path: string): number
  /** Answers every held request at `path` with `status`, and future ones too (the script is replaced). */
  release(path: string, status?: number): void
  close(): Promise<void>
}

/** A webhook receiver on loopback over https with the given certificate, scriptable per path. */
export async function startWebhookReceiver(tls: { cert: string; key: string }): Promise<WebhookReceiver> {
  const received = new Map<string, Received[]>()
  const scripts = new Map<string, Answer[]>()
  const holding = new Map<string, http.ServerResponse[]>()
  const server = https.createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    const at = Date.now()
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const path = req.url ?? '/'
      const list = received.get(path) ?? []
      received.set(path, list)
      list.push({ path, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at })
      const answers = scripts.get(path) ?? [200]
      const answer = answers[Math.min(list.length - 1, answers.length - 1)]!
      if (answer === 'hang') {
        const open = holding.get(path) ?? []
        holding.set(path, open)
        open.push(res)
        res.on('close', () => {
          const i = open.indexOf(res)
          if (i >= 0) open.splice(i, 1)
        })
        return
      }
      res.writeHead(answer, { 'content-type': 'text/plain' }).end(answer < 300 ? 'ok' : 'no')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    port,
    url: (path, host = 'localhost') => `https://${host}:${port}${path}`,
    received: (path) => [...(received.get(path) ?? [])],
    script: (path, answers) => void scripts.set(path, answers),
    waitFor: (path, count, ms) => waitFor(`${count} request(s) at ${path}`, async () => (received.get(path)?.length ?? 0) >= count && [...received.get(path)!], ms),
    held: (path) => holding.get(path)?.length ?? 0,
    release(path, status = 200) {
      scripts.set(path, [status])
      for (const res of [...(holding.get(path) ?? [])]) res.writeHead(status).end()
    },
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
