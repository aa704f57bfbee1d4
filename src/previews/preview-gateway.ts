import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import net from 'node:net'
import tls from 'node:tls'
import type { Duplex } from 'node:stream'
import type { Config } from '../config.ts'
import type { Store } from '../db/database.ts'
import type { WorkspaceManager } from '../workspaces/workspace-manager.ts'
import { PAGES, rawPage, sendPage } from './preview-page.ts'
import { previewSubdomainMatcher } from './preview-address.ts'
import { hopByHop } from '../shared/hop-by-hop.ts'
import { previewBySubdomain, type PreviewRow } from './previews.store.ts'
import { markedCache } from '../db/marked-cache.ts'
import { silentLog, type Log } from '../shared/log.ts'
import { Agent, type Dispatcher } from 'undici'
import { hostOnlyCookies, hostOnlyCookiesInHead } from './preview-cookies.ts'
import { previewUpstream, type PreviewUpstream } from './preview-upstream.ts'

/**
 * Serves previews: a request whose Host is `{subdomain}.{preview domain}` goes to the port its
 * session published, in that session's sandbox (HTTP, streamed responses, WebSocket upgrades).
 * It runs in front of the API's router, on the raw server, so a preview costs no API machinery
 * and no path on a preview host ever reaches the API.
 */
export type PreviewGateway = {
  /** Serves the request when its Host names a preview; false when it is the API's. */
  handleRequest(req: IncomingMessage, res: ServerResponse): boolean
  /** The same for an upgrade (WebSocket); non-preview upgrades are refused, the API has none. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void
  /** Serves a known preview to a caller the API authenticated: `path` is what follows the proxy prefix. */
  serve(row: PreviewRow, req: IncomingMessage, res: ServerResponse, path: string): Promise<void>
  /** Cuts every open connection of the session's preview (taken down, or the session deleted). */
  cut(sessionId: string): void
  /** Cuts every open preview connection (the service is stopping: an open WebSocket would hold it). */
  close(): void
}

// The caller's credentials never reach a workspace: its Authorization (a token for the API, or
// anything else a client sends everywhere) on any address. On a preview host the browser sends
// only that host's cookies, which the site set itself (their Domain dropped on the way out), so
// they go back to it. On the API's own origin, shared by every session's token-gated preview,
// cookies go neither way. An Expect was answered by this server already; the pool would refuse it.
const PREVIEW_HOST_DROP = new Set(['expect', 'authorization'])
const API_ORIGIN_DROP = new Set(['expect', 'authorization', 'cookie'])
// Passed on to the node that owns the workspace, a request goes as it came: that node drops.
const TO_PEER_DROP = new Set(['expect'])
/** The most a workspace's WebSocket handshake answer may take before its blank line. */
const MAX_UPGRADE_HEAD = 64 * 1024
/** How that answer must begin: Chromium skips a few bytes before it, which would hide the head from the filter. */
const STATUS_LINE_START = Buffer.from('HTTP/')
/** Control bytes no valid head holds (tab, CR and LF aside): parsers differ on them (a NUL taken for a line end), so such a head is cut. */
const CONTROL_BYTE = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/

/** Where a request goes (a sandbox's preview target, or a peer node); `headers`: set on the request to it (a peer node's secret). */
type Target = PreviewUpstream & { release: () => void; headers?: Record<string, string> }

/**
 * The node that owns a session whose workspace is not on this one, for a preview request to be
 * passed on to (its preview host unchanged, so that the owner serves it); null: serve it here.
 */
export type PreviewOwners = {
  /** Never for a request a peer passed on already (`headers` show this node's secret). */
  route(sessionId: string, headers: IncomingMessage['headers']): Promise<{ host: string; port: number; headers: Record<string, string> } | null>
  /** The header a peer's secret travels in: never passed on to a workspace. */
  header: string
}

export function previewGateway(deps: { store: Store; workspaces: WorkspaceManager; config: Config; owners?: PreviewOwners; log?: Log }): PreviewGateway {
  const { store, workspaces, config } = deps
  const log = deps.log ?? silentLog
  const never = new Set(deps.owners ? [deps.owners.header] : [])
  // Made once: only the domain's port changes once the service listens, and ports are ignored.
  const previewSubdomainOf = previewSubdomainMatcher(config.previewDomain)
  // Keep-alive towards the sandboxes, a pool for each address (a workspace's, or a peer node's):
  // a page's many requests reuse a few connections, whatever Host each names. No time limits: a
  // development server may take long to build a page, and a stream may idle between events.
  const upstreams = new Agent({ connections: 256, headersTimeout: 0, bodyTimeout: 0 })
  // What a preview has open: an exchange in flight (its cut ends that exchange only, never the
  // client's connection as a whole, which may carry other hosts' requests) or an upgraded socket.
  const open = new Map<string, Set<() => void>>()
  // Whose site a subdomain is, read once while the store is quiet (SQLite): any write, an
  // unpublish, a move, a session deleted (here or in another process), moves the mark and the
  // next request reads again. Without a write mark (PostgreSQL) every request reads the store.
  const routes = markedCache<PreviewRow>(store)
  const route = (sub: string): PreviewRow | Promise<PreviewRow | null> => routes.kept(sub, undefined) ?? routes(sub, () => previewBySubdomain(store.db, sub))

  /** Registers `cut` under the session until `until` closes. */
  const track = (sessionId: string, until: { once(event: 'close', fn: () => void): unknown }, cut: () => void) => {
    let set = open.get(sessionId)
    if (!set) open.set(sessionId, (set = new Set()))
    set.add(cut)
    until.once('close', () => {
      set.delete(cut)
      if (set.size === 0 && open.get(sessionId) === set) open.delete(sessionId)
    })
  }

  /** Where the row's port is reached, holding the workspace awake until released; or the page saying why not. */
  async function reach(row: PreviewRow, reqHeaders: IncomingMessage['headers']): Promise<Target | { page: ReturnType<typeof PAGES.notRunning> }> {
    try {
      // A paused workspace resumes here; one that cannot is answered with the page, not a hang.
      const sandbox = await workspaces.live(row.session_id)
      if (!sandbox) {
        // Its workspace runs on another node: the request goes there as it came.
        const peer = await deps.owners?.route(row.session_id, reqHeaders)
        return peer ? { ...previewUpstream(peer), headers: peer.headers, release: () => {} } : { page: PAGES.notRunning() }
      }
      // Parsed before the hold: a target the gateway cannot dial is a workspace it cannot reach.
      const upstream = previewUpstream(await sandbox.resolvePreview(row.port))
      return { ...upstream, release: workspaces.hold(row.session_id) }
    } catch {
      return { page: PAGES.notRunning() }
    }
  }

  function forwardedHeaders(req: IncomingMessage, drop: Set<string>): http.OutgoingHttpHeaders {
    const headers: http.OutgoingHttpHeaders = {}
    const hop = hopByHop(req.headers)
    const raw = req.rawHeaders
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i]!.toLowerCase()
      if (hop.has(name) || drop.has(name) || never.has(name)) continue
      const prev = headers[name]
      headers[name] = prev === undefined ? raw[i + 1]! : Array.isArray(prev) ? [...prev, raw[i + 1]!] : [String(prev), raw[i + 1]!]
    }
    const client = req.socket.remoteAddress ?? ''
    headers['x-forwarded-for'] = typeof headers['x-forwarded-for'] === 'string' ? `${headers['x-forwarded-for']}, ${client}` : client
    headers['x-forwarded-proto'] ??= 'http'
    headers['x-forwarded-host'] ??= req.headers.host ?? ''
    return headers
  }

  async function proxy(row: PreviewRow, req: IncomingMessage, res: ServerResponse, path: string, onApiOrigin: boolean): Promise<void> {
    // On the API's own origin the caller's token never reaches the workspace, and the page runs
    // sandboxed (an opaque origin): a site served there must not act as the API's origin in a browser.
    track(row.session_id, res, () => res.destroy())
    const target = await reach(row, req.headers)
    if ('page' in target) return sendPage(res, target.page)
    // Passed on to the owner (a peer's secret goes along), a request goes as it came: a preview
    // host's unchanged, and the API origin's with its API path and the caller's token, since the
    // owner serves it through the same route, checks the token again and drops it there.
    const toPeer = target.headers !== undefined
    // The client may have gone while the workspace woke: nothing is started for nobody.
    if (res.destroyed) return target.release()
    let released = false
    const release = () => {
      if (!released) (released = true), target.release()
    }
    let controller: Dispatcher.DispatchController | null = null
    // A client that goes away takes its upstream request with it (and the workspace's hold).
    res.once('close', () => {
      release()
      if (!res.writableFinished) controller?.abort(new Error('the client went away'))
    })
    const headers = forwardedHeaders(req, toPeer ? TO_PEER_DROP : onApiOrigin ? API_ORIGIN_DROP : PREVIEW_HOST_DROP)
    if (target.headers) Object.assign(headers, target.headers)
    // A target served at a URL of its own routes by its own Host; the caller's is in x-forwarded-host.
    if (target.hostHeader) headers.host = target.hostHeader
    // A request without a length or chunks has no body: nothing is read from it.
    const body = req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined ? null : req
    upstreams.dispatch(
      { origin: target.origin, method: req.method ?? 'GET', path: toPeer ? (req.url ?? path) : path, headers: headers as Record<string, string | string[]>, body },
      {
        onRequestStart(c) {
          if (res.destroyed) return c.abort(new Error('the client went away'))
          controller = c
        },
        onResponseStart(c, status, answer, statusMessage) {
          const out: http.OutgoingHttpHeaders = {}
          const hop = hopByHop(answer)
          for (const name in answer) {
            const value = answer[name]
            if (value === undefined || hop.has(name) || (name === 'set-cookie' && onApiOrigin)) continue
            out[name] = name === 'set-cookie' ? hostOnlyCookies([value].flat()) : value
          }
          if (onApiOrigin) out['content-security-policy'] = 'sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads'
          res.writeHead(status, statusMessage, out)
        },
        // Streamed as it comes (server-sent events, chunked pages): each chunk is written at once,
        // and the workspace is read no faster than the client takes it.
        onResponseData(c, chunk) {
          if (!res.write(chunk)) {
            c.pause()
            res.once('drain', () => c.resume())
          }
        },
        onResponseEnd() {
          res.end()
        },
        onResponseError(_c, err: Error & { code?: string }) {
          release()
          if (res.headersSent || res.destroyed) return void res.destroy()
          sendPage(res, err.code === 'ECONNREFUSED' ? PAGES.nothingListening(row.port) : PAGES.failed(row.port, err.code ?? 'connection error'))
        },
      },
    )
  }

  async function upgrade(row: PreviewRow, req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    track(row.session_id, socket, () => socket.destroy())
    const target = await reach(row, req.headers)
    if ('page' in target) return void socket.end(rawPage(target.page, 'Bad Gateway'))
    if (socket.destroyed) return target.release()
    socket.once('close', target.release)
    const upstream = target.tls ? tls.connect({ host: target.host, port: target.port, ...(net.isIP(target.host) ? {} : { servername: target.host }) }) : net.connect({ host: target.host, port: target.port })
    track(row.session_id, upstream, () => upstream.destroy())
    upstream.setNoDelay(true)
    upstream.once('error', (err: NodeJS.ErrnoException) => {
      if (upstream.bytesRead > 0) return void socket.destroy()
      socket.end(rawPage(err.code === 'ECONNREFUSED' ? PAGES.nothingListening(row.port) : PAGES.failed(row.port, err.code ?? 'connection error'), 'Bad Gateway'))
    })
    // No half-open WebSockets: the client leaving ends both sides (the server socket is half-open
    // capable, so without this nothing would ever close); the site leaving ends the client's after
    // what it sent has been written.
    socket.once('error', () => upstream.destroy())
    socket.once('end', () => upstream.destroy())
    socket.once('close', () => upstream.destroy())
    upstream.once('close', () => socket.end(() => socket.destroy()))
    upstream.once(target.tls ? 'secureConnect' : 'connect', () => {
      // The request goes on as the client wrote it (upgrade headers included), then both ways raw.
      const lines = [`${req.method} ${req.url} HTTP/1.1`]
      const headers = { ...forwardedHeaders(req, target.headers ? TO_PEER_DROP : PREVIEW_HOST_DROP), ...target.headers, ...(target.hostHeader ? { host: target.hostHeader } : {}) }
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        const name = req.rawHeaders[i]!.toLowerCase()
        if (name === 'connection' || name === 'upgrade') lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`)
      }
      for (const [name, value] of Object.entries(headers)) for (const v of [value].flat()) lines.push(`${name}: ${v}`)
      upstream.write(lines.join('\r\n') + '\r\n\r\n')
      if (head.length > 0) upstream.write(head)
      socket.pipe(upstream)
      relayAnswerHead(upstream, socket)
    })
  }

  // What the proxy handles (a workspace not listening, an upstream reset) never lands here: this
  // is the gateway's own failure (a store read, a wake), logged while the visitor gets a page.
  const failed = (res: ServerResponse) => (err: unknown) => {
    log.warn({ component: 'previews', err }, 'serving a preview request failed')
    sendPage(res, PAGES.error())
  }

  return {
    handleRequest(req, res) {
      const sub = previewSubdomainOf(req.headers.host)
      if (sub === null) return false
      const kept = route(sub)
      if (!(kept instanceof Promise)) {
        // The common case, answered without waiting for a read.
        proxy(kept, req, res, req.url ?? '/', false).catch(failed(res))
        return true
      }
      kept.then((row) => (row ? proxy(row, req, res, req.url ?? '/', false) : sendPage(res, PAGES.unknown()))).catch(failed(res))
      return true
    },
    handleUpgrade(req, socket, head) {
      // Node takes its own error listener off an upgraded socket: without one, a client resetting
      // the connection while the lookup runs would bring the whole process down.
      socket.on('error', () => socket.destroy())
      const sub = previewSubdomainOf(req.headers.host)
      if (sub === null) return void socket.end(rawPage(PAGES.unknown(), 'Not Found'))
      void Promise.resolve(route(sub))
        .then((row) => (row ? upgrade(row, req, socket, head) : void socket.end(rawPage(PAGES.unknown(), 'Not Found'))))
        .catch((err) => {
          log.warn({ component: 'previews', err }, 'serving a preview WebSocket upgrade failed')
          socket.destroy()
        })
    },
    // The caller's token never reaches the workspace.
    serve: (row, req, res, path) => proxy(row, req, res, path, true),
    cut(sessionId) {
      for (const cut of open.get(sessionId) ?? []) cut()
      open.delete(sessionId)
    },
    close() {
      for (const id of [...open.keys()]) this.cut(id)
      void upstreams.destroy()
    },
  }
}

/**
 * Relays the workspace's answer to an upgrade: its head with the cookies kept on the host (as
 * for any other answer), then the rest raw, both ways. A head that never ends is cut.
 */
function relayAnswerHead(upstream: net.Socket, socket: Duplex): void {
  let buffered = Buffer.alloc(0)
  const onData = (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk])
    // Anything before the status line (a browser looks past up to four bytes of it) is refused: a
    // blank line made of it would pass for the end of the head, and the real head go on unfiltered.
    const start = Math.min(buffered.length, STATUS_LINE_START.length)
    if (!buffered.subarray(0, start).equals(STATUS_LINE_START.subarray(0, start))) return void upstream.destroy()
    const end = /\r?\n\r?\n/.exec(buffered.toString('latin1'))
    if (!end) {
      if (buffered.length > MAX_UPGRADE_HEAD) upstream.destroy()
      return
    }
    // Paused before the listener goes: a stream left flowing with no listener loses what comes.
    upstream.pause()
    upstream.off('data', onData)
    const headEnd = end.index + end[0].length
    const head = buffered.subarray(0, headEnd).toString('latin1')
    if (CONTROL_BYTE.test(head)) return void upstream.destroy()
    socket.write(Buffer.from(hostOnlyCookiesInHead(head), 'latin1'))
    if (buffered.length > headEnd) socket.write(buffered.subarray(headEnd))
    upstream.pipe(socket)
  }
  upstream.on('data', onData)
}
