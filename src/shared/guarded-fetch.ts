import http from 'node:http'
import https from 'node:https'
import { Readable } from 'node:stream'
import type { PrivatePolicy } from './address-policy.ts'
import { guardedLookup, RefusedAddressError, refusedHost } from './guarded-lookup.ts'

/** A JSON answer larger than this is cut off (a stream of events is not: it is read as it comes). */
const MAX_BODY_BYTES = 32 * 1024 * 1024

/** A fetch that opens only the connections the address policy allows. */
export type GuardedFetch = (url: string | URL, init?: RequestInit) => Promise<Response>

/**
 * A fetch for a server a caller named (a remote MCP server, a model provider's models list) that
 * connects only to addresses the SSRF guard accepts (the webhooks' guard: the name is resolved
 * once, every address judged, the socket connects to exactly those), and never follows a redirect
 * (a 3xx is an answer, so a server cannot send the service on to an address it would refuse).
 * Responses stream, for SSE. `refused` says which setting would allow a refused address; `what`
 * names the server in errors ("MCP servers").
 */
export function guardedFetch(opts: { allowPrivate: PrivatePolicy; refused: string; what: string }): GuardedFetch {
  const lookup = guardedLookup({ allowPrivate: opts.allowPrivate, refused: opts.refused })
  const agents = {
    'http:': new http.Agent({ keepAlive: true, lookup }),
    'https:': new https.Agent({ keepAlive: true, lookup }),
  }
  return async (input, init = {}) => {
    const url = new URL(String(input))
    const agent = agents[url.protocol as keyof typeof agents]
    if (!agent) throw new TypeError(`${opts.what} are reached over http(s), not ${url.protocol}`)
    // Sockets never look names up for literal addresses: those are judged here.
    const early = refusedHost(url.hostname, opts.refused, opts.allowPrivate)
    if (early) throw new RefusedAddressError(early)
    const headers = new Headers(init.headers)
    const body = init.body === undefined || init.body === null ? undefined : typeof init.body === 'string' ? init.body : Buffer.from(await new Response(init.body).arrayBuffer())
    return new Promise<Response>((resolve, reject) => {
      const req = (url.protocol === 'https:' ? https : http).request(url, { method: init.method ?? 'GET', headers: Object.fromEntries(headers), agent, signal: init.signal ?? undefined }, (res) => {
        const out = new Headers()
        for (const [k, v] of Object.entries(res.headers)) for (const one of [v ?? []].flat()) out.append(k, one)
        const status = res.statusCode ?? 502
        const empty = status === 204 || status === 304 || init.method === 'HEAD'
        if (empty) res.resume()
        if (!empty && !String(res.headers['content-type'] ?? '').includes('text/event-stream')) {
          let size = 0
          res.on('data', (d: Buffer) => {
            size += d.length
            if (size > MAX_BODY_BYTES) res.destroy(new Error(`the answer is over ${MAX_BODY_BYTES} bytes`))
          })
        }
        resolve(new Response(empty ? null : (Readable.toWeb(res) as ReadableStream), { status, statusText: res.statusMessage, headers: out }))
      })
      req.on('error', reject)
      req.end(body)
    })
  }
}
