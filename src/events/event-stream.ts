import type { ServerResponse } from 'node:http'
import type { Store } from '../db/database.ts'
import { MIB } from '../http/limits.ts'
import type { EventBus, TransientEvent } from './event-bus.ts'
import type { EventTail, TailRow } from './event-tail.ts'
import { lastSeq, readEventsAfter, type StreamScope } from './events.store.ts'
import { isSessionDeleted } from '../sessions/sessions.store.ts'
import { PING_FRAME, RETRY_FRAME, persistedFrame, replayTruncatedFrame, transientFrame, type EventRowText } from './sse-frames.ts'
import { persistedInternalTypes, publicName } from './vocabulary.ts'

/** Rows read from the store at a time, in a replay and when catching up live. */
const PAGE = 1000
/** Unread bytes past which live-only frames are dropped (rule 4). */
const TRANSIENT_DROP_BYTES = MIB
/** Unread bytes past which the connection is closed; the client resumes from its last seq (rule 4). */
const CLOSE_BYTES = 8 * MIB

/** Live-only frames kept while persisted ones are read; more are dropped, as a slow reader's would be. */
const HELD_MAX = 1000
/** Rows kept for a stream that is busy (replaying); past this it re-reads the store instead. */
const QUEUE_MAX = 10_000
/** Marks the end of a session: its stream closes once everything before it has been sent. */
const SESSION_DELETED = 'session.deleted'
/** Every internal type a stream reads: the persisted published ones, and a session's end. */
export const STREAM_TYPES = [...persistedInternalTypes(), SESSION_DELETED]

export type EventStreamOptions = {
  store: Store
  bus: EventBus
  /** The process's shared reader of new events, which live streams follow. */
  tail: EventTail
  res: ServerResponse
  /** Response headers already set for this request (request id, rate-limit figures). */
  headers: Record<string, string | string[] | number | undefined>
  scope: StreamScope
  /** null: live frames only; n: every persisted event after seq n, then live frames (0 = all). */
  cursor: number | null
  replayLimit: number
  pingMs: number
  /** Asked at every ping: false (a token revoked or expired since) ends the stream. */
  stillAllowed(): Promise<boolean>
}

export type OpenStream = { end(): void; closed: Promise<void> }

/**
 * One SSE connection. Persisted frames come only from the store: first read from the cursor (a
 * replay, page by page), then handed over by the process's shared tail, which the stream follows
 * before its first read, so the hand-over from replay to live can neither lose nor repeat an
 * event (the stream keeps its own cursor and drops what it has sent). Seq order is commit order
 * (see withEvents), so a read after `cursor` never skips a lower seq that commits later.
 */
export function openEventStream(o: EventStreamOptions): OpenStream {
  const { res, scope } = o
  const types = scope.sessionId !== undefined ? STREAM_TYPES : persistedInternalTypes()
  const typeSet = new Set(types)
  let closed = false
  let live = false
  let dirty = false
  let wake: (() => void) | null = null
  /** Live-only frames that arrived while persisted ones were being read: sent after them. */
  let held: string[] = []
  let resolveClosed!: () => void
  const closedPromise = new Promise<void>((r) => (resolveClosed = r))

  const inScope = (orgId: string, sessionId: string | null) => orgId === scope.orgId && (scope.sessionId === undefined || sessionId === scope.sessionId)
  /** Rows of this scope handed over by the tail, not yet sent. */
  let queue: TailRow[] = []
  const onRows = (rows: TailRow[]) => {
    if (closed) return
    for (const r of rows) if (inScope(r.org_id, r.session_id) && typeSet.has(r.type)) queue.push(r)
    // A reader far behind (a long replay) reads the store itself instead of growing the queue.
    if (queue.length > QUEUE_MAX) {
      queue = []
      dirty = true
    }
    // Rows to send, or the tail caught up and live-only frames wait for it.
    if (queue.length > 0 || dirty || held.length > 0) wake?.()
  }
  const onTransient = (e: TransientEvent) => {
    if (!live || closed || !inScope(e.orgId, e.sessionId) || publicName(e.type) === null) return
    // Sent after whatever was committed before it, which may still be being read.
    if (dirty || queue.length > 0 || wake === null || o.tail.reading()) {
      if (held.length < HELD_MAX) held.push(transientFrame(e))
    } else sendTransient(transientFrame(e))
  }
  const unsubscribe = [o.bus.subscribeTransient(onTransient)]
  const ping = setInterval(() => {
    write(PING_FRAME)
    o.stillAllowed().then(
      (ok) => ok || end(),
      () => {},
    )
    // A wake-up lost between processes (the bus is only a hint) costs at most one ping.
    dirty = true
    wake?.()
  }, o.pingMs)

  const end = () => {
    if (closed) return
    closed = true
    clearInterval(ping)
    for (const u of unsubscribe) u()
    held = []
    wake?.()
    if (!res.destroyed) res.end()
    resolveClosed()
  }
  res.on('close', end)
  res.on('error', end)
  // A client gone while the stream was being set up: its 'close' has already been emitted.
  if (res.socket === null || res.socket.destroyed) queueMicrotask(end)

  /** Writes a frame; past the ceiling of unread bytes the connection is cut. */
  const write = (frame: string): void => {
    if (closed) return
    res.write(frame)
    if (res.writableLength > CLOSE_BYTES) {
      res.destroy()
      end()
    }
  }
  const sendTransient = (frame: string) => {
    if (res.writableLength <= TRANSIENT_DROP_BYTES) write(frame)
  }
  const drained = () =>
    new Promise<void>((resolve) => {
      const done = () => {
        res.off('drain', done)
        res.off('close', done)
        resolve()
      }
      res.on('drain', done)
      res.on('close', done)
    })

  /**
   * Sends the rows as frames, joined into writes of about 64 KiB. A replay (`pace`) waits for the
   * client to take what it was sent before adding past the transient ceiling, so a slow reader
   * replays slowly instead of being cut off; live catch-up does not wait (rule 4). Returns false
   * once the session's end was read: nothing more will come.
   */
  const sendRows = async (rows: EventRowText[], pace: boolean): Promise<boolean> => {
    let frames = ''
    for (const row of rows) {
      if (row.type === SESSION_DELETED) {
        write(frames)
        return false
      }
      frames += persistedFrame(row)
      if (frames.length < 65_536) continue
      write(frames)
      frames = ''
      if (pace && res.writableLength > TRANSIENT_DROP_BYTES) await drained()
      if (closed) return false
    }
    if (frames) write(frames)
    return true
  }
  const read = (after: number, limit: number) => readEventsAfter(o.store.db, scope, types, after, limit)
  /** A session deleted before a cursor taken from the log's end: its end will not be read. */
  const sessionEnded = async () => scope.sessionId !== undefined && (await isSessionDeleted(o.store.db, scope.sessionId))

  const run = async () => {
    res.socket?.setKeepAlive(true, 10_000)
    res.socket?.setNoDelay(true)
    res.writeHead(200, {
      ...o.headers,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      // Tells nginx-like proxies not to buffer the stream.
      'x-accel-buffering': 'no',
    })
    write(RETRY_FRAME)
    // Followed before the first read of the store, so nothing committed falls between the two.
    const unfollow = await o.tail.follow(onRows)
    if (closed) return unfollow()
    unsubscribe.push(unfollow)
    let cursor: number
    if (o.cursor === null) {
      cursor = await lastSeq(o.store.db)
      if (await sessionEnded()) return end()
    } else {
      cursor = o.cursor
      let sent = 0
      for (;;) {
        // One row past the ceiling says whether more than the ceiling waits.
        const want = Math.min(PAGE, o.replayLimit - sent + 1)
        const rows = await read(cursor, want)
        if (closed) return
        const room = o.replayLimit - sent
        const page = rows.slice(0, room)
        if (page.length > 0) {
          if (!(await sendRows(page, true))) return end()
          cursor = page.at(-1)!.seq
          sent += page.length
        }
        if (rows.length > room) {
          write(replayTruncatedFrame(cursor, o.replayLimit))
          cursor = await lastSeq(o.store.db)
          if (await sessionEnded()) return end()
          break
        }
        if (rows.length < want) break
      }
    }
    live = true
    // Everything after the cursor is read once from the store; from then on the tail hands over
    // what is committed (it was followed before the first read, so nothing falls between).
    dirty = true
    while (!closed) {
      if (dirty) {
        dirty = false
        for (;;) {
          const rows = await read(cursor, PAGE)
          if (closed) return
          if (rows.length > 0) {
            if (!(await sendRows(rows, false))) return end()
            cursor = rows.at(-1)!.seq
          }
          if (rows.length < PAGE) break
        }
      }
      if (queue.length > 0) {
        const rows = queue.filter((r) => r.seq > cursor)
        queue = []
        if (rows.length > 0) {
          if (!(await sendRows(rows, false))) return end()
          cursor = rows.at(-1)!.seq
        }
      }
      if (dirty || queue.length > 0) continue
      const waiting = held
      held = []
      for (const f of waiting) sendTransient(f)
      if (dirty || queue.length > 0) continue
      await new Promise<void>((r) => (wake = r))
      wake = null
    }
  }
  run().catch(() => {
    // The store failed mid-stream: the client reconnects with its last seq and loses nothing.
    res.destroy()
    end()
  })
  return { end, closed: closedPromise }
}
