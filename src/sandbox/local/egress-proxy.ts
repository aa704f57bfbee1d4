import { lookup as dnsLookup } from 'node:dns/promises'
import { createServer, request as httpRequest, STATUS_CODES, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import { connect, createServer as createTcpServer, isIP, type AddressInfo, type Server, type Socket } from 'node:net'
import { addressRefusal, inCidr, type PrivatePolicy } from '../../shared/address-policy.ts'
import { hostAllowed, normalizeHost } from './net-address-policy.ts'
import { hopByHop } from '../../shared/hop-by-hop.ts'

/**
 * The egress proxy: the one door out of a sandbox. Sandboxes reach it on the host side of their
 * own veth (one listener per sandbox, all on the same port) and speak plain HTTP proxy: CONNECT
 * for tunnels (https, anything TCP) and absolute-URI requests for http. The caller is identified
 * by the connection's source address, which the host's nftables rules pin to the sandbox's veth.
 */

export type LookupFn = (hostname: string) => Promise<{ address: string; family: number }[]>
export type ProxyLogger = { info(obj: object, msg: string): void; warn(obj: object, msg: string): void }

export type EgressProxyOptions = {
  /** The first listener's address (127.0.0.1 in practice: it only reserves the port). */
  host: string
  /** 0 or absent: a free port. Every later listener uses the same port. */
  port?: number
  /** The sandbox behind a source address (and the local address it connected to), or null. */
  resolveSandbox(remoteAddress: string, localAddress?: string): { allow: string[]; deny?: string[] } | null
  /** Lets private ranges through: true for all of them, or a list of CIDRs (tests' own namespaces). */
  allowPrivate?: PrivatePolicy
  /** CIDRs refused whatever allowPrivate says: the sandboxes' own pool (no sandbox reaches another). */
  forbidden?: string[]
  /** Resolves a name once; the proxy connects to exactly the address it checked. Default dns.lookup. */
  lookup?: LookupFn
  /** Tunnels and requests in flight per sandbox (default 64): one sandbox cannot exhaust the host. */
  maxConnectionsPerSandbox?: number
  connectTimeoutMs?: number
  logger?: ProxyLogger
  /** Refusals logged per sandbox a minute (default 20); past it they are counted, and the count logged once the minute is over. */
  refusalLogsPerMinute?: number
  /** The clock the refusal log budget reads (tests). */
  now?: () => number
}

export type EgressProxy = {
  readonly port: number
  readonly address: string
  /** Accepts connections on one more local address (a sandbox's host-side veth address). */
  listen(host: string): Promise<void>
  unlisten(host: string): Promise<void>
  /** Cuts every connection from this source address (the sandbox is going away). */
  disconnect(remoteAddress: string): void
  close(): Promise<void>
}

/** Longest caller-written target a refusal's log line carries (a DNS name is at most 253 bytes). */
const MAX_LOGGED_TARGET = 260

type Grant = { address: string; port: number; release(): void }
type Refusal = { status: number; reason: string }

const plainAddress = (a: string | undefined) => (a ?? '').replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, '')

const defaultLookup: LookupFn = (hostname) => dnsLookup(hostname, { all: true, order: 'verbatim' })

export async function startEgressProxy(opts: EgressProxyOptions): Promise<EgressProxy> {
  const lookup = opts.lookup ?? defaultLookup
  const maxConnections = opts.maxConnectionsPerSandbox ?? 64
  const connectTimeoutMs = opts.connectTimeoutMs ?? 10_000
  const inFlight = new Map<string, number>()
  const clients = new Map<string, Set<Socket>>()
  const listeners = new Map<string, Server>()
  const http = createServer({ headersTimeout: 30_000, requestTimeout: 0 })

  const logBudget = opts.refusalLogsPerMinute ?? 20
  const now = opts.now ?? Date.now
  const logWindows = new Map<string, { from: number; logged: number; unlogged: number }>()

  function refuse(who: string, target: string, r: Refusal): Refusal {
    if (!opts.logger) return r
    // A workspace can ask for refusals as fast as it likes: each sandbox has a budget of lines a
    // minute, so it cannot flood the operator's log; what is past it is counted, and said once.
    const at = now()
    let w = logWindows.get(who)
    if (!w || at - w.from >= 60_000) {
      if (w && w.unlogged > 0) opts.logger.info({ sandbox: who, unlogged: w.unlogged }, 'egress refusals past the log budget')
      w = { from: at, logged: 0, unlogged: 0 }
      logWindows.set(who, w)
    }
    if (w.logged >= logBudget) {
      w.unlogged++
      return r
    }
    w.logged++
    // The target is the caller's to write (a workspace's, or any local process's): a host name is
    // at most 253 bytes, so more is cut, and the line says how long it was.
    const cut = target.length > MAX_LOGGED_TARGET ? { target: target.slice(0, MAX_LOGGED_TARGET), target_cut_from: target.length } : { target }
    opts.logger.info({ sandbox: who, ...cut, status: r.status, reason: r.reason }, 'egress refused')
    return r
  }

  /** Allowlist, per-sandbox budget, one lookup, address check: everything before connecting. */
  async function authorize(socket: Socket, rawHost: string, port: number): Promise<Grant | Refusal> {
    const remote = plainAddress(socket.remoteAddress)
    const sandbox = opts.resolveSandbox(remote, plainAddress(socket.localAddress))
    if (!sandbox) return refuse(remote, rawHost, { status: 403, reason: 'unknown sandbox' })
    const host = normalizeHost(rawHost)
    if (!host) return refuse(remote, rawHost, { status: 400, reason: 'invalid host' })
    if (!Number.isInteger(port) || port < 1 || port > 65535) return refuse(remote, host, { status: 400, reason: 'invalid port' })
    if (!hostAllowed(host, sandbox.allow, sandbox.deny)) {
      return refuse(remote, host, { status: 403, reason: `${host} is not on this sandbox's allowlist` })
    }
    const count = inFlight.get(remote) ?? 0
    if (count >= maxConnections) return refuse(remote, host, { status: 429, reason: 'too many concurrent connections' })
    inFlight.set(remote, count + 1)
    let released = false
    const release = () => {
      if (released) return
      released = true
      const n = (inFlight.get(remote) ?? 1) - 1
      if (n > 0) inFlight.set(remote, n)
      else inFlight.delete(remote)
    }
    let candidates: { address: string }[]
    try {
      candidates = isIP(host) ? [{ address: host }] : await lookup(host)
    } catch {
      release()
      return refuse(remote, host, { status: 502, reason: `cannot resolve ${host}` })
    }
    let why = 'no address'
    for (const c of candidates) {
      const refusal = (opts.forbidden ?? []).some((cidr) => inCidr(c.address, cidr)) ? "another sandbox's address" : addressRefusal(c.address, opts.allowPrivate)
      if (!refusal) return { address: c.address, port, release }
      why = refusal
    }
    release()
    return refuse(remote, host, { status: 403, reason: `${host} resolves to a forbidden address (${why})` })
  }

  function rawReply(socket: Socket, r: Refusal) {
    const body = `${r.reason}\n`
    socket.end(`HTTP/1.1 ${r.status} ${STATUS_CODES[r.status]}\r\nContent-Type: text/plain; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
  }

  /** CONNECT host:port: check, dial the checked address, then splice the two sockets. */
  async function onConnect(req: IncomingMessage, client: Socket, head: Buffer) {
    client.on('error', () => client.destroy())
    const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]/]+):(\d{1,5})$/.exec(req.url ?? '')
    if (!m) return rawReply(client, { status: 400, reason: 'CONNECT needs host:port' })
    const grant = await authorize(client, m[1], Number(m[2]))
    if ('status' in grant) return rawReply(client, grant)
    if (client.destroyed) return grant.release()
    const upstream = connect({ host: grant.address, port: grant.port })
    let open = false
    upstream.setTimeout(connectTimeoutMs, () => upstream.destroy(new Error('connect timeout')))
    upstream.once('connect', () => {
      open = true
      upstream.setTimeout(0)
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
      if (head.length) upstream.write(head)
      upstream.pipe(client)
      client.pipe(upstream)
    })
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      if (open) client.destroy()
      else rawReply(client, { status: 502, reason: `cannot connect to ${m[1]}:${m[2]} (${err.code ?? err.message})` })
    })
    upstream.once('close', () => {
      grant.release()
      if (open) client.destroy()
    })
    client.once('close', () => upstream.destroy())
  }

  function forwardHeaders(headers: IncomingHttpHeaders): IncomingHttpHeaders {
    const out: IncomingHttpHeaders = { ...headers }
    for (const h of hopByHop(headers)) delete out[h]
    return out
  }

  function reply(res: ServerResponse, r: Refusal) {
    if (res.headersSent) return res.destroy()
    // Marked as the proxy's own answer, so a tool can tell a refusal from a site's 403.
    res.writeHead(r.status, { 'content-type': 'text/plain; charset=utf-8', connection: 'close', 'x-warren-egress': 'refused' }).end(`${r.reason}\n`)
  }

  /** Absolute-URI http requests; one upstream connection each (no pool shared across sandboxes). */
  async function onRequest(req: IncomingMessage, res: ServerResponse) {
    let url: URL
    try {
      url = new URL(req.url ?? '')
    } catch {
      return reply(res, { status: 400, reason: 'this is a proxy: send an absolute http:// URI, or CONNECT' })
    }
    if (url.protocol !== 'http:') return reply(res, { status: 400, reason: 'only http:// URIs; use CONNECT for https' })
    const grant = await authorize(req.socket, url.hostname, url.port ? Number(url.port) : 80)
    if ('status' in grant) return reply(res, grant)
    if (res.closed) return grant.release()
    // Host is rewritten from the checked URL: another Host header would let an allowed address
    // (a CDN, say) serve a domain that is not on the allowlist.
    const headers = { ...forwardHeaders(req.headers), host: url.host }
    const up = httpRequest({
      host: grant.address, port: grant.port, method: req.method, path: url.pathname + url.search,
      headers, agent: false, setHost: false,
    })
    up.on('socket', (s) => {
      s.setTimeout(connectTimeoutMs, () => up.destroy(new Error('connect timeout')))
      s.once('connect', () => s.setTimeout(0))
    })
    up.on('response', (upRes) => {
      res.writeHead(upRes.statusCode ?? 502, forwardHeaders(upRes.headers))
      upRes.pipe(res)
    })
    up.on('error', (err: NodeJS.ErrnoException) => reply(res, { status: 502, reason: `upstream failed (${err.code ?? err.message})` }))
    res.once('close', () => {
      up.destroy()
      grant.release()
    })
    req.pipe(up)
  }

  http.on('connect', (req, socket, head) => void onConnect(req, socket as Socket, head))
  http.on('request', (req, res) => void onRequest(req, res))

  function track(socket: Socket) {
    const key = plainAddress(socket.remoteAddress)
    let set = clients.get(key)
    if (!set) clients.set(key, (set = new Set()))
    set.add(socket)
    socket.once('close', () => {
      set.delete(socket)
      if (set.size === 0 && clients.get(key) === set) clients.delete(key)
    })
  }

  async function addListener(host: string, port: number): Promise<number> {
    if (listeners.has(host)) return port
    const server = createTcpServer((socket) => {
      track(socket)
      http.emit('connection', socket)
    })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen({ host, port, exclusive: true }, () => {
        server.off('error', reject)
        resolve()
      })
    })
    listeners.set(host, server)
    return (server.address() as AddressInfo).port
  }

  const address = opts.host
  const port = await addListener(address, opts.port ?? 0)
  return {
    port,
    address,
    listen: async (host) => void (await addListener(host, port)),
    async unlisten(host) {
      const server = listeners.get(host)
      listeners.delete(host)
      server?.close()
    },
    disconnect(remoteAddress) {
      logWindows.delete(plainAddress(remoteAddress))
      for (const s of clients.get(plainAddress(remoteAddress)) ?? []) s.destroy()
    },
    async close() {
      for (const server of listeners.values()) server.close()
      listeners.clear()
      for (const set of clients.values()) for (const s of set) s.destroy()
      http.close()
    },
  }
}
