import { createHmac, timingSafeEqual } from 'node:crypto'
import type { components } from './schema.ts'

/** A webhook delivery's body (the description's WebhookDelivery): the object is named in `data`, never embedded. */
export type WebhookDelivery = components['schemas']['WebhookDelivery']

export type VerifyOptions = {
  /** The subscription's secret, as shown once when it was created. */
  secret: string
  /** The raw body, exactly as received (not parsed and written again). */
  body: string | Uint8Array
  /** The request's headers (a Headers, or Node's IncomingHttpHeaders). */
  headers: Headers | Record<string, string | string[] | undefined>
  /** How far the timestamp may be from this machine's clock. Default five minutes. */
  toleranceMs?: number
  now?: number
}

export class WebhookVerificationError extends Error {
  override readonly name = 'WebhookVerificationError'
}

const header = (h: VerifyOptions['headers'], name: string): string | undefined => {
  const v = h instanceof Headers ? h.get(name) ?? undefined : h[name]
  return Array.isArray(v) ? v[0] : v
}

/**
 * Checks a delivery the way the specification says (HMAC-SHA256 of `{timestamp}.{raw body}` with
 * the subscription secret, compared in constant time, the millisecond timestamp near this clock) and
 * returns its parsed body; throws WebhookVerificationError, saying which check failed, otherwise.
 */
export function verifyWebhook(opts: VerifyOptions): WebhookDelivery {
  const timestamp = header(opts.headers, 'x-service-timestamp')
  const signature = header(opts.headers, 'x-service-signature')
  if (!timestamp || !/^\d+$/.test(timestamp)) throw new WebhookVerificationError('The x-service-timestamp header is missing or not a digit string.')
  if (!signature || !/^[0-9a-f]{64}$/.test(signature)) throw new WebhookVerificationError('The x-service-signature header is missing or not 64 lowercase hex digits.')
  const body = typeof opts.body === 'string' ? Buffer.from(opts.body, 'utf8') : Buffer.from(opts.body)
  const expected = createHmac('sha256', opts.secret).update(`${timestamp}.`).update(body).digest()
  if (!timingSafeEqual(expected, Buffer.from(signature, 'hex'))) throw new WebhookVerificationError('The signature does not match this secret and body.')
  const skew = Math.abs((opts.now ?? Date.now()) - Number(timestamp))
  if (skew > (opts.toleranceMs ?? 5 * 60_000)) throw new WebhookVerificationError(`The timestamp is ${Math.round(skew / 1000)} s away from this clock.`)
  return JSON.parse(body.toString('utf8')) as WebhookDelivery
}
