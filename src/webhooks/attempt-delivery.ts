import type { DeliveryOutcome } from './deliveries.store.ts'
import type { ReadyDelivery } from './claimed-deliveries.ts'
import { deliveryBody, signDelivery } from './delivery-body.ts'
import type { DeliverySender } from './send-delivery.ts'

/**
 * One attempt of a claimed delivery: the signed request, sent so that it ends by `notAfter` (before
 * its claim runs out, so that no other process takes it while it is on the wire), and what it
 * leaves on the delivery: delivered, failed (due again after the next of `delays`, or dead once
 * they are used up), or given back uncounted when the service stops. `tookMs`: how long the
 * receiver took. Never rejects for the receiver's sake; a throw here is a bug of ours.
 */
export async function attemptDelivery(
  sender: DeliverySender,
  d: ReadyDelivery,
  delays: number[],
  signal: AbortSignal,
  notAfter: number,
): Promise<{ outcome: DeliveryOutcome; tookMs: number }> {
  const { row, event, target, lease } = d
  const body = deliveryBody(event)
  const timestamp = String(Date.now())
  const headers = {
    'content-type': 'application/json',
    'user-agent': 'warren-webhooks/0.1',
    'x-service-timestamp': timestamp,
    'x-service-signature': signDelivery(target.secret, timestamp, body),
    'x-warren-delivery': row.id,
  }
  const sent = Date.now()
  const result = await sender.send({ url: target.url, headers, body }, signal, notAfter)
  const at = Date.now()
  const k = row.attempts + 1
  const outcome: DeliveryOutcome =
    'aborted' in result
      ? { id: row.id, kind: 'rescheduled', lease, at }
      : result.ok
        ? { id: row.id, kind: 'delivered', attempts: k }
        : { id: row.id, kind: 'failed', lease, attempts: k, error: result.reason, at, nextAttemptAt: k >= delays.length ? null : at + delays[k]! }
  return { outcome, tookMs: at - sent }
}
