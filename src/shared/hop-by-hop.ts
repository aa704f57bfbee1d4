/**
 * Headers that belong to one connection and never cross a proxy (RFC 9110 §7.6.1): the fixed
 * ones, and whatever the message's own Connection header names.
 */
const HOP_BY_HOP: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'])

/** Connection values that name no header beyond the fixed ones. */
const PLAIN = new Set(['keep-alive', 'close', 'upgrade'])

/**
 * The lower-case names a proxy must drop from a message with these headers. The fixed set itself
 * when the Connection header names nothing more (`keep-alive`, `close`): the preview proxy asks
 * twice a request, and a new set each time was a good part of its own cost.
 */
export function hopByHop(headers: { connection?: string | string[] | undefined }): ReadonlySet<string> {
  const connection = headers.connection
  if (connection === undefined) return HOP_BY_HOP
  // What nearly every client sends, answered without taking the value apart.
  if (typeof connection === 'string' && PLAIN.has(connection.toLowerCase())) return HOP_BY_HOP
  const listed = [connection].flat().flatMap((v) => v.split(',')).map((h) => h.trim().toLowerCase()).filter(Boolean)
  if (listed.every((h) => HOP_BY_HOP.has(h) || h === 'close')) return HOP_BY_HOP
  return new Set([...HOP_BY_HOP, ...listed])
}
