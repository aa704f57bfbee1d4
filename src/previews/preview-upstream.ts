import type { PreviewTarget } from '../sandbox/sandbox.ts'

/**
 * A preview target as the gateway dials it: the origin undici pools by, the host and port a
 * WebSocket upgrade connects to (over TLS when `tls`), and the Host the upstream is sent (null:
 * the request's own, which an address target has always been sent).
 */
export type PreviewUpstream = { origin: string; host: string; port: number; tls: boolean; hostHeader: string | null }

/**
 * The upstream of a provider's preview target. Throws a TypeError when a URL target is not an
 * http(s) origin (a path, a query, credentials or another scheme): a provider's mistake, which
 * the gateway answers as a workspace it cannot reach.
 */
export function previewUpstream(target: PreviewTarget): PreviewUpstream {
  if ('url' in target) {
    const u = URL.parse(target.url)
    if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:') || u.username || u.password || u.search || u.hash || (u.pathname !== '/' && u.pathname !== '')) {
      throw new TypeError(`a preview target must be an http(s) origin, got ${target.url}`)
    }
    const tls = u.protocol === 'https:'
    // The brackets of an IPv6 literal are the URL's, not the address's.
    return { origin: u.origin, host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port) || (tls ? 443 : 80), tls, hostHeader: u.host }
  }
  const named = target.host.includes(':') ? `[${target.host}]` : target.host
  return { origin: `http://${named}:${target.port}`, host: target.host, port: target.port, tls: false, hostHeader: null }
}
