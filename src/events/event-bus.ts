import { EventEmitter } from 'node:events'

/** A committed event, as much as a listener needs to decide whether to re-read the log. */
export type EventNotice = { seq: number; orgId: string; sessionId: string | null; type: string }

/**
 * Wakes listeners after a commit. It carries no truth: listeners re-read the store, so a lost
 * wake-up delays a reader but never loses an event. One process uses this in-memory bus; several
 * processes on PostgreSQL add LISTEN/NOTIFY behind the same seam.
 */
export type EventBus = {
  notify(notice: EventNotice): void
  subscribe(listener: (notice: EventNotice) => void): () => void
}

export function memoryEventBus(): EventBus {
  const emitter = new EventEmitter()
  emitter.setMaxListeners(0)
  return {
    notify: (n) => emitter.emit('event', n),
    subscribe(listener) {
      emitter.on('event', listener)
      return () => emitter.off('event', listener)
    },
  }
}
