import type http from 'node:http'
import https from 'node:https'
import tls from 'node:tls'
import type { PrivatePolicy } from '../shared/address-policy.ts'
import { guardedLookup, refusedHost } from '../shared/guarded-lookup.ts'
import { connectionFailure, withoutAddresses } from '../shared/connection-failure.ts'

export const WEBHOOK_REFUSED = 'deliveries to loopback, private and link-local addresses are refused unless WARREN_ALLOW_PRIVATE_WEBHOOKS lists them'

export type OutgoingDelivery = { url: string; headers: Record<string, string>; body: string }

/** `aborted`: the service is stopping; the attempt does not count. */
export type SendResult = { ok: true } | { ok: false; reason: string } | { aborted: true }

export type DeliverySender = {
  /** Resolves, never rejects: any non-2xx answer, error or time-out is `ok: false` with a reason. */
  /** `notAfter`: the attempt ends by then whatever the time-out (the claim's lease runs out soon after). */
  send(d: OutgoingDelivery, signal: AbortSignal, notAfter?: number): Promise<SendResult>
  close(): void
}

export type SenderOptions = {
  /** The CIDRs of WARREN_ALLOW_PRIVATE_WEBHOOKS. */
  allowPrivate: PrivatePolicy
  /** The whole request, connect to the end of the answer. */
  timeoutMs: number
  maxSockets: number
  /** Extra certificates to trust besides the system's, for receivers with a test certificate; deployments use NODE_EXTRA_CA_CERTS. */
  ca?: string
}

class TimedOut extends Error {}
class Aborted extends Error {}

// A kept-alive socket the receiver closed while idle fails the next request before any answer;
// that is no answer from the receiver, so the request goes again on another socket.
const STALE = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED'])
const TLS_CODE = /CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO_|ALTNAME|SIGNATURE|HOSTNAME/

/** The recorded reason of a failed attempt: plain words, the error code where there is one. */
function failureReason(err: unknown, timeoutMs: number): string {
  if (err instanceof TimedOut) return `timed out after ${timeoutMs} ms`
  const e = err as NodeJS.ErrnoException
  const code = e?.code ?? ''
  const message = e?.message || String(err)
  if (code === 'EWARRENREFUSED') return message
  if (code === 'ECONNRESET') return 'connection reset by the receiver (ECONNRESET)'
  // A socket's own message names the address connected to (for a name, what it resolved to).
  const socket = connectionFailure(err)
  if (socket) return socket
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
    const host = (e as { hostname?: string }).hostname
    return `${host ? `host ${host}` : 'the host'} could not be resolved (${code})`
  }
  // Node adds advice about its own flags to some certificate errors; a receiver's operator has no use for it.
  if (TLS_CODE.test(code)) return `TLS: ${message.replace(/; if the root CA is installed locally.*$/, '')}`
  return withoutAddresses(code && !message.includes(code) ? `${message} (${code})` : message, err).slice(0, 500)
}

export function deliverySender(opts: SenderOptions): DeliverySender {
  const agent = new https.Agent({
    keepAlive: true,
    maxSockets: opts.maxSockets,
    scheduling: 'lifo',
    lookup: guardedLookup({ allowPrivate: opts.allowPrivate, refused: WEBHOOK_REFUSED }),
    // One context made once: a `ca` option would be part of every request's socket-pool key.
    ...(opts.ca ? { secureContext: tls.createSecureContext({ ca: [...tls.rootCertificates, opts.ca] }) } : {}),
  })

  const once = (d: OutgoingDelivery, deadline: number, signal: AbortSignal) =>
    new Promise<{ result: SendResult; stale: boolean }>((resolve) => {
      let settled = false
      const req = https.request(d.url, { method: 'POST', agent, headers: { ...d.headers, 'content-length': String(Buffer.byteLength(d.body)) } })
      const timer = setTimeout(() => req.destroy(new TimedOut()), Math.max(0, deadline - Date.now()))
      const onAbort = () => req.destroy(new Aborted())
      signal.addEventListener('abort', onAbort, { once: true })
      const finish = (result: SendResult, stale = false) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        signal.removeEventListener('abort', onAbort)
        resolve({ result, stale })
      }
      const failed = (err: unknown, gotAnswer: boolean) => {
        if (err instanceof Aborted) return finish({ aborted: true })
        const stale = !gotAnswer && req.reusedSocket && STALE.has((err as NodeJS.ErrnoException).code ?? '')
        finish({ ok: false, reason: failureReason(err, opts.timeoutMs) }, stale)
      }
      let answer: http.IncomingMessage | null = null
      const answered = () => {
        const status = answer!.statusCode ?? 0
        finish(status >= 200 && status < 300 ? { ok: true } : { ok: false, reason: `receiver answered ${status}` })
      }
      req.on('response', (res) => {
        answer = res
        res.on('error', (err) => failed(err, true))
        res.on('end', answered)
        // The answer's body is not used; reading it frees the socket for the next delivery.
        res.resume()
      })
      req.on('error', (err) => failed(err, false))
      req.on('close', () => {
        if (answer?.complete) answered()
        else finish({ ok: false, reason: answer ? `receiver answered ${answer.statusCode} but closed the connection before the end of its answer` : 'the receiver closed the connection without answering' })
      })
      req.end(d.body)
    })

  return {
    async send(d, signal, notAfter = Infinity) {
      // Sockets never look up an address literal, so the guard's lookup would not see it.
      const why = refusedHost(new URL(d.url).hostname, WEBHOOK_REFUSED, opts.allowPrivate)
      if (why) return { ok: false, reason: why }
      const deadline = Math.min(Date.now() + opts.timeoutMs, notAfter)
      for (let tries = 1; ; tries++) {
        if (signal.aborted) return { aborted: true }
        const { result, stale } = await once(d, deadline, signal)
        if (!stale || tries >= 3) return result
      }
    },
    close: () => agent.destroy(),
  }
}
