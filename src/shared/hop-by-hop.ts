/**
 * Headers that belong to one connection and never cross a proxy (RFC 9110 §7.6.1): the fixed
 * ones, and whatever the message's own Connection header names.
 */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade']

/** The lower-case names a proxy must drop from a message with these headers. */
export function hopByHop(headers: { connection?: string | string[] | undefined }): Set<string> {
  const listed = [headers.connection ?? []].flat().flatMap((v) => v.split(',')).map((h) => h.trim().toLowerCase()).filter(Boolean)
  return new Set([...HOP_BY_HOP, ...listed])
}
