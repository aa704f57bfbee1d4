import type { Db } from '../db/database.ts'
import type { EventPayloads, WebhookEventName } from '../events/events.schema.ts'
import type { Recorder } from '../events/record-event.ts'
import type { SessionStatus } from './sessions.schema.ts'
import { liveSessionStatus, setSessionStatus } from './sessions.store.ts'

/** The internal signal recorded with each move; webhooks send it under the same name. */
export const STATUS_SIGNAL: Record<SessionStatus, WebhookEventName & `session.${string}`> = {
  idle: 'session.idle',
  working: 'session.working',
  requires_action: 'session.action_required',
  failed: 'session.failed',
}

/**
 * Moves the session's status and records the signal of the move, inside the caller's
 * transaction. Nothing is recorded when the status does not change, unless `always` (a turn
 * starting is `session.working` even straight after another turn).
 */
export async function moveSession(
  trx: Db,
  record: Recorder,
  session: { id: string; orgId: string },
  to: SessionStatus,
  data: Omit<EventPayloads['session.working'], 'session_id' | 'status'>,
  opts: { always?: boolean } = {},
): Promise<void> {
  const from = await liveSessionStatus(trx, session.id)
  if (from === null) return
  if (from === to && !opts.always) return
  await setSessionStatus(trx, session.id, to, Date.now())
  await record({ orgId: session.orgId, sessionId: session.id, turnId: data.turn_id ?? null, type: STATUS_SIGNAL[to], payload: { session_id: session.id, status: to, ...data } })
}
