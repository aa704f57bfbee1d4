import http from 'node:http'
import { waitFor } from './fixtures.ts'

/** One parsed SSE frame: its fields as sent (`data` parsed from its JSON line). */
export type Frame = { id?: string; event?: string; data?: any; retry?: string; comment?: string; raw: string; /** Date.now() when the chunk that completed the frame arrived. */ receivedAt: number }

export type SseClient = {
  status: number
  headers: http.IncomingHttpHeaders
  /** Every frame received so far, in order (comments and the retry hint included). */
  frames: Frame[]
  /** The frames that carry an event (not comments, not the bare retry hint). */
  events(): Frame[]
  /** The body of a refusal (a non-200 answer), read whole. */
  body: string
  ended: Promise<void>
  isEnded(): boolean
  /** Stops reading: the service's writes back up in the socket. */
  pause(): void
  resume(): void
  close(): void
  /** Waits until `check(frames)` holds. */
  until(what: string, check: (events: Frame[]) => boolean, ms?: number): Promise<Frame[]>
}

/**
 * A real SSE client over a socket: parses the wire format as EventSource does (fields per line,
 * frames separated by a blank line), so tests see exactly the bytes the service sent.
 */
export function openSse(baseUrl: string, path: string, opts: { token: string; lastEventId?: string; headers?: Record<string, string>; /** Told of each frame as it is parsed (to act on it without polling). */ onFrame?: (f: Frame) => void }): Promise<SseClient> {
  return new Promise((resolve, reject) => {
    const req = http.request(baseUrl + path, {
      headers: { authorization: `Bearer ${opts.token}`, accept: 'text/event-stream', ...(opts.lastEventId !== undefined ? { 'last-event-id': opts.lastEventId } : {}), ...opts.headers },
    })
    req.on('error', reject)
    req.on('response', (res) => {
      let ended = false
      let endedResolve!: () => void
      const endedP = new Promise<void>((r) => (endedResolve = r))
      const finish = () => {
        ended = true
        endedResolve()
      }
      res.on('end', finish)
      res.on('close', finish)
      res.on('error', finish)
      const frames: Frame[] = []
      let buffer = ''
      let body = ''
      const client: SseClient = {
        status: res.statusCode ?? 0,
        headers: res.headers,
        frames,
        events: () => frames.filter((f) => f.event !== undefined || f.data !== undefined),
        get body() {
          return body
        },
        ended: endedP,
        isEnded: () => ended,
        pause: () => res.pause(),
        resume: () => res.resume(),
        close: () => {
          req.destroy()
          res.destroy()
        },
        until: (what, check, ms = 20_000) => waitFor(what, async () => check(client.events()) && client.events(), ms),
      }
      res.setEncoding('utf8')
      if (client.status !== 200) {
        res.on('data', (c: string) => (body += c))
        res.on('end', () => resolve(client))
        return
      }
      res.on('data', (chunk: string) => {
        const receivedAt = Date.now()
        buffer += chunk
        for (;;) {
          const at = buffer.indexOf('\n\n')
          if (at < 0) break
          const raw = buffer.slice(0, at)
          buffer = buffer.slice(at + 2)
          const f: Frame = { raw, receivedAt }
          for (const line of raw.split('\n')) {
            const colon = line.indexOf(':')
            const field = colon < 0 ? line : line.slice(0, colon)
            const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '')
            if (field === '') f.comment = value
            else if (field === 'data') f.data = JSON.parse(value)
            else if (field === 'id' || field === 'event' || field === 'retry') f[field] = value
          }
          frames.push(f)
          opts.onFrame?.(f)
        }
      })
      resolve(client)
    })
    req.end()
  })
}
