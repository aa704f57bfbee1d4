import { EventEmitter } from 'node:events'
import type { EventPayloads, LiveEventName } from './events.schema.ts'

/** A committed event, as much as a listener needs to decide whether to re-read the log. */
export type EventNotice = { seq: number; orgId: string; sessionId: string | null; type: string }

/** A notice that names no event: listeners should look at the store again (a bus reconnected after notices may have been lost). */
export const RESYNC = 'bus.resync'

/** A live-only event (token deltas, progress): never stored, never replayed, `seq` null on the wire. */
export type TransientEvent = { orgId: string; sessionId: string; turnId: string | null; createdAt: number } & {
  [N in LiveEventName]: { type: N; payload: EventPayloads[N] }
}[LiveEventName]

/**
 * Asks the node that owns a session to act on it. The intent is in the store already (a turn
 * queued, a cancel requested, the session deleted); the command only wakes the owner, so a lost
 * one delays the work until the owner's next look at its sessions, never loses it.
 */
export type NodeCommand = { to: string; kind: 'kick' | 'cancel' | 'deleted'; sessionId: string; turnId?: string }

/**
 * Wakes listeners after a commit, and carries transient events to live streams. Notices carry no
 * truth: listeners re-read the store, so a lost wake-up delays a reader but never loses an event.
 * One process uses this in-memory bus; several processes on PostgreSQL add LISTEN/NOTIFY behind
 * the same seam.
 */
export type EventBus = {
  notify(notice: EventNotice): void
  subscribe(listener: (notice: EventNotice) => void): () => void
  publish(event: TransientEvent): void
  subscribeTransient(listener: (event: TransientEvent) => void): () => void
  /** Carries a command to every node (each listener keeps those addressed to it). */
  command(c: NodeCommand): void
  onCommand(listener: (c: NodeCommand) => void): () => void
  /** Lets go of what the bus holds open (a PostgreSQL connection); the in-memory bus holds nothing. */
  close(): Promise<void>
}

export function memoryEventBus(): EventBus {
  const emitter = new EventEmitter()
  emitter.setMaxListeners(0)
  const on = <T>(name: string, listener: (v: T) => void) => {
    emitter.on(name, listener)
    return () => void emitter.off(name, listener)
  }
  return {
    notify: (n) => emitter.emit('event', n),
    subscribe: (listener) => on('event', listener),
    publish: (e) => emitter.emit('transient', e),
    subscribeTransient: (listener) => on('transient', listener),
    command: (c) => emitter.emit('command', c),
    onCommand: (listener) => on('command', listener),
    close: async () => {},
  }
}
