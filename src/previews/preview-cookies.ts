/**
 * A cookie a preview sets stays on its own host: a Domain attribute would let one preview set
 * cookies for every other preview under the same domain (and for the service's own host). The
 * attribute is found the way a browser finds it (RFC 6265 §5.2): the cookie's attributes are what
 * follows its first `;`, split at each `;`, and an attribute's name is what precedes its first `=`,
 * trimmed and compared without case. So `Domain = .x`, `DOMAIN\t=x` and a bare `Domain` all go.
 * Cookies a page sets from script never pass here: the preview domain itself must keep browsers
 * from scoping a cookie to it (see the README).
 */
export function hostOnlyCookie(setCookie: string): string {
  const [pair = '', ...attributes] = setCookie.split(';')
  const kept = attributes.filter((a) => a.split('=', 1)[0]!.trim().toLowerCase() !== 'domain').map((a) => a.trim())
  return [pair.trim(), ...kept.filter(Boolean)].join('; ')
}

export const hostOnlyCookies = (cookies: string[]): string[] => cookies.map(hostOnlyCookie)

/**
 * A raw response head (a WebSocket handshake's, written by the workspace) with its Set-Cookie
 * lines kept on the host. Lines are split at a bare LF or a bare CR as well: Chromium reads either
 * as a line end, so a Set-Cookie after a bare CR is a header of its own there.
 * A line that begins with a space or a tab continues the header above it (obsolete folding,
 * which Chromium still joins): it is joined here first, or a Domain folded onto a line of its own
 * would pass as a header of no name and reach the browser as part of the cookie.
 */
export function hostOnlyCookiesInHead(head: string): string {
  const lines: string[] = []
  for (const line of head.replace(/[\r\n]+$/, '').split(/\r\n|\r|\n/)) {
    if (lines.length > 1 && /^[ \t]/.test(line)) lines[lines.length - 1] += ` ${line.trim()}`
    else lines.push(line)
  }
  const out = lines.map((line, i) => {
    const colon = line.indexOf(':')
    if (i === 0 || colon < 0 || line.slice(0, colon).trim().toLowerCase() !== 'set-cookie') return line
    return `${line.slice(0, colon)}: ${hostOnlyCookie(line.slice(colon + 1))}`
  })
  return out.join('\r\n') + '\r\n\r\n'
}
