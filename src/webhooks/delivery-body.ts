import { createHmac } from 'node:crypto'

/** What a delivery body is built from: the stored event, which never changes, so retries send the same bytes. */
export type DeliveredEvent = { type: string; createdAt: number; sessionId: string | null; turnId: string | null; payload: Record<string, unknown> }

/**
 * The delivery body: `{object, type, created_at, data}`. `data` names objects and never embeds
 * them: the session always, the turn when the event has one, and for `session.action_required`
 * only the kind of action (the receiver reads the session for the rest).
 */
export function deliveryBody(e: DeliveredEvent): string {
  const sessionId = (e.payload.session_id as string | undefined) ?? e.sessionId
  const turnId = (e.payload.turn_id as string | undefined) ?? e.turnId
  const data: Record<string, unknown> = { session_id: sessionId }
  if (turnId) data.turn_id = turnId
  if (e.type === 'session.action_required') data.required_action = { type: 'function_call' }
  return JSON.stringify({ object: 'event', type: e.type, created_at: e.createdAt, data })
}

/** Lowercase hex HMAC-SHA256, keyed with the subscription secret as shown to the caller, over `{timestamp}.{body}`. */
export function signDelivery(secret: string, timestamp: string, body: string): string {
  return createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')
}
