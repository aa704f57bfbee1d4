import { createParser } from 'eventsource-parser'
import { WarrenError } from './errors.ts'
import type { WarrenEvent } from './vocabulary.ts'

export type StreamOptions = {
  /** One session's stream; without it, the organization's. */
  sessionId?: string
  /**
   * Where to start: omitted, live events only; `0`, everything persisted and then live; `n`, what
   * was persisted after `seq` n. After a cut the stream resumes from the last persisted event it
   * gave, whatever was asked first.
   */
  after?: number
  signal?: AbortSignal
  /** Called each time a connection is open and about to deliver frames (e.g. to send a message only once the stream listens). */
  onOpen?: () => void
  /** Called when the connection is lost and about to be opened again (for a "reconnecting…" line). */
  onReconnect?: (info: { after: number | undefined; error: unknown }) => void
}

/** What a stream needs of its client. */
export type StreamContext = { baseUrl: string; headers: Record<string, string>; fetch: typeof fetch }

/** The service's `retry:` hint before it sends one (the specification's 2000 ms). */
const DEFAULT_RETRY_MS = 2000

class Truncated {
  readonly fromSeq: number
  constructor(fromSeq: number) {
    this.fromSeq = fromSeq
  }
}

/**
 * The events of a session (or of the organization), as an async iterator that does not end until
 * `signal` aborts: a lost connection is opened again after the service's `retry:` hint with
 * `Last-Event-ID` set to the last persisted event given, so no persisted event is lost or given
 * twice; a `service.replay_truncated` frame is followed by reconnecting from its `from_seq`; a
 * stream slot not yet freed (`rate_limit_exceeded`) is waited for. Any other refusal throws WarrenError.
 */
export async function* streamEvents(ctx: StreamContext, opts: StreamOptions = {}): AsyncGenerator<WarrenEvent, void, undefined> {
  const path = opts.sessionId ? `/v1/sessions/${encodeURIComponent(opts.sessionId)}/events` : '/v1/events'
  let cursor = opts.after
  let retryMs = DEFAULT_RETRY_MS
  for (;;) {
    let error: unknown = null
    try {
      const res = await ctx.fetch(new Request(ctx.baseUrl + path, {
        headers: { ...ctx.headers, accept: 'text/event-stream', ...(cursor !== undefined ? { 'last-event-id': String(cursor) } : {}) },
        signal: opts.signal,
      }))
      if (res.status !== 200) {
        const err = await WarrenError.from(res)
        if (err.code !== 'rate_limit_exceeded') throw err
        retryMs = (err.retryAfter ?? 1) * 1000
        error = err
      } else {
        opts.onOpen?.()
        for await (const frame of frames(res, (ms) => (retryMs = ms))) {
          if (frame instanceof Truncated) {
            cursor = frame.fromSeq
            retryMs = 0
            break
          }
          if (frame.seq !== null) cursor = frame.seq
          yield frame
        }
      }
    } catch (err) {
      if (opts.signal?.aborted) return
      if (err instanceof WarrenError) throw err
      error = err
    }
    if (opts.signal?.aborted) return
    opts.onReconnect?.({ after: cursor, error })
    await new Promise((resolve) => setTimeout(resolve, retryMs))
    if (retryMs === 0) retryMs = DEFAULT_RETRY_MS
  }
}

/** The frames of one connection until it ends; comments (`: ping`) are skipped. */
async function* frames(res: Response, onRetry: (ms: number) => void): AsyncGenerator<WarrenEvent | Truncated> {
  const queue: (WarrenEvent | Truncated)[] = []
  const parser = createParser({
    onRetry,
    onEvent: (msg) => {
      const data = JSON.parse(msg.data) as WarrenEvent & { from_seq?: number }
      queue.push(msg.event === 'service.replay_truncated' ? new Truncated(Number(data.from_seq)) : data)
    },
  })
  const decoder = new TextDecoder()
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    parser.feed(decoder.decode(chunk, { stream: true }))
    while (queue.length > 0) yield queue.shift()!
  }
}
