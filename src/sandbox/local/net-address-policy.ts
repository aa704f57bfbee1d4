import { isIP } from 'node:net'
import { globMatch } from '../../shared/glob.ts'

// Which names the egress proxy lets a sandbox ask for. The addresses they resolve to are judged
// after, by the service-wide address policy (shared/address-policy.ts).

/**
 * A CONNECT authority or URL host, normalised (lower case, no trailing dot, no IPv6 brackets),
 * or null when it is not a syntactically valid host name or IP literal.
 */
export function normalizeHost(raw: string): string | null {
  let host = raw.toLowerCase()
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1)
  if (isIP(host)) return host
  if (host.endsWith('.')) host = host.slice(0, -1)
  if (host.length === 0 || host.length > 253) return null
  const labels = host.split('.')
  return labels.every((l) => /^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$/.test(l)) ? host : null
}

/**
 * `*` matches one label, `**` one or more, anything else must match exactly (case-insensitive).
 * A host any deny glob matches is refused whatever the allow list says.
 */
export function hostAllowed(host: string, allow: string[], deny: string[] = []): boolean {
  const matches = (pattern: string) => pattern.toLowerCase() === host || globMatch(pattern, host, '.', true)
  return !deny.some(matches) && allow.some(matches)
}
