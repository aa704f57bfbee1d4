import { publicName } from './vocabulary.ts'

/** A persisted event row as the stream reads it: the payload stays the JSON text it was stored as. */
export type EventRowText = { seq: number; session_id: string | null; type: string; created_at: number; payload: string }

/** Sent once on open: how long a client should wait before reconnecting (rule 5). */
export const RETRY_FRAME = 'retry: 2000\n\n'
export const PING_FRAME = ': ping\n\n'

/**
 * The frame of a persisted event: `id:` (its seq), `event:` (its published name) and one `data:`
 * line. The stored payload text is spliced in as it is, not parsed and re-serialised: it was
 * written by JSON.stringify, so it is one line of valid JSON, and replaying 50,000 events stays a
 * matter of string joins.
 */
export function persistedFrame(row: EventRowText): string {
  const name = publicName(row.type)!
  const seq = Number(row.seq)
  return (
    `id: ${seq}\nevent: ${name}\ndata: {"object":"event","type":${JSON.stringify(name)},"internal_type":${JSON.stringify(row.type)},` +
    `"session_id":${JSON.stringify(row.session_id)},"seq":${seq},"created_at":${Number(row.created_at)},"payload":${row.payload}}\n\n`
  )
}

/** The frame of a live-only event: no `id:` line, `seq` null (rule 1). */
export function transientFrame(e: { sessionId: string; type: string; createdAt: number; payload: Record<string, unknown> }): string {
  const name = publicName(e.type)!
  const data = { object: 'event', type: name, internal_type: e.type, session_id: e.sessionId, seq: null, created_at: e.createdAt, payload: e.payload }
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`
}

/** Rule 3: the replay stopped at its ceiling; reconnecting with `fromSeq` collects the rest. */
export function replayTruncatedFrame(fromSeq: number, limit: number): string {
  const data = {
    object: 'event',
    type: 'service.replay_truncated',
    seq: null,
    from_seq: fromSeq,
    note: `More than ${limit} events waited, so the replay stopped after ${limit}; live events follow. Reconnect with last_event_id=${fromSeq} to collect the rest.`,
  }
  return `event: service.replay_truncated\ndata: ${JSON.stringify(data)}\n\n`
}
