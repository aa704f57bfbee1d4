import type { Config } from '../config.ts'

/** 2 to 63 of a-z, 0-9 and hyphen: one DNS label, as the specification words it. */
export const SUBDOMAIN_PATTERN = '^[a-z0-9-]{2,63}$'
const SUBDOMAIN = new RegExp(SUBDOMAIN_PATTERN)

/** A host name without its port, lowercased (Host headers are case-insensitive). */
const hostname = (host: string): string => host.toLowerCase().replace(/:\d*$/, '').replace(/\.$/, '')

/**
 * The subdomain a request's Host names under the preview domain, or null when the request is not
 * for a preview. Ports are ignored on both sides: whatever port it arrived on, the request reached
 * this process, and a proxy in front may well have changed it.
 */
export function previewSubdomainOf(host: string | undefined, previewDomain: string): string | null {
  return previewSubdomainMatcher(previewDomain)(host)
}

/** previewSubdomainOf for one preview domain, its suffix worked out once: it runs on every request. */
export function previewSubdomainMatcher(previewDomain: string): (host: string | undefined) => string | null {
  const suffix = `.${hostname(previewDomain)}`
  return (host) => {
    if (!host) return null
    const name = hostname(host)
    if (!name.endsWith(suffix)) return null
    const label = name.slice(0, -suffix.length)
    return SUBDOMAIN.test(label) ? label : null
  }
}

/** The subdomain a session gets when none is asked for: its id, made a valid label. */
export function derivedSubdomain(sessionId: string): string {
  return sessionId.toLowerCase().replace(/[^a-z0-9-]/g, '-').slice(0, 63)
}

/** The public address of a subdomain: on the service's own origin, needing no token. */
export function publishedUrl(config: Config, subdomain: string): string {
  return `http://${subdomain}.${config.previewDomain}/`
}

/** The address that serves the same site to a caller holding an access token. */
export function tokenUrl(config: Config, sessionId: string): string {
  return `${config.publicUrl}/v1/sessions/${sessionId}/preview/proxy/`
}
