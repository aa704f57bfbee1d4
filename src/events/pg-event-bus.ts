import { randomUUID } from 'node:crypto'
import pg from 'pg'
import { logFailure, silentLog, type Log } from '../shared/log.ts'
import { RESYNC, memoryEventBus, type EventBus, type EventNotice, type NodeCommand, type TransientEvent } from './event-bus.ts'

/** PostgreSQL refuses a NOTIFY payload of 8000 bytes or more. */
const MAX_PAYLOAD = 7900
const RECONNECT_MS = 1000

type Message = { from: string; notices?: EventNotice[]; transient?: TransientEvent; command?: NodeCommand }

/**
 * The bus of several service processes on one PostgreSQL: each process wakes its own listeners at
 * once, as the memory bus does, and tells the others through LISTEN/NOTIFY (notices of one event
 * loop turn go out in one NOTIFY). Notices stay wake-ups, never truth: a listener re-reads the
 * store, and a stream also re-reads on every ping, so a NOTIFY lost while the connection is being
 * re-made delays a reader by at most one ping. A transient event too large for one NOTIFY stays
 * in the process that made it. A lost connection, a failed reconnect and a NOTIFY that did not go
 * out are logged (warn): other nodes hear of this one late until it is back.
 */
export async function pgEventBus(databaseUrl: string, schema: string | undefined, log: Log = silentLog): Promise<EventBus> {
  const local = memoryEventBus()
  const me = randomUUID()
  // NOTIFY is per database; one channel per schema keeps deployments (and test runs) sharing a
  // database apart, so that no notice of theirs ever wakes a reader here.
  const channel = `warren_events_${(schema ?? 'public').replace(/[^a-z0-9_]/gi, '_')}`.slice(0, 63).toLowerCase()
  let client: pg.Client | null = null
  let closed = false
  /** NOTIFYs go out one at a time on the listening connection (pg runs one query at a time). */
  let sending: Promise<unknown> = Promise.resolve()
  let pending: EventNotice[] = []
  let flushing = false

  const connect = async (): Promise<void> => {
    // Keep-alive: a half-open connection would otherwise never end, and never be made again.
    // Named by its channel, so an operator finds it in pg_stat_activity.
    const c = new pg.Client({ connectionString: databaseUrl, application_name: channel, connectionTimeoutMillis: 3000, keepAlive: true, keepAliveInitialDelayMillis: 10_000 })
    // The connection's errors end it ('end' below): logged there, once, with the error seen.
    let failure: Error | undefined
    c.on('error', (err) => void (failure ??= err))
    c.on('end', () => {
      const listening = client === c
      if (listening) client = null
      if (closed) return
      if (listening) log.warn({ component: 'event-bus', err: failure }, 'the event bus lost its PostgreSQL connection: reconnecting')
      setTimeout(() => void connect().catch(logFailure(log, 'the event bus could not reconnect to PostgreSQL: trying again', { component: 'event-bus' })), RECONNECT_MS).unref()
    })
    c.on('notification', (msg) => {
      if (msg.channel !== channel || !msg.payload) return
      let m: Message
      try {
        m = JSON.parse(msg.payload) as Message
      } catch {
        return
      }
      if (m.from === me) return
      for (const n of m.notices ?? []) local.notify(n)
      if (m.transient) local.publish(m.transient)
      if (m.command) local.command(m.command)
    })
    try {
      await c.connect()
      await c.query(`LISTEN "${channel}"`)
      client = c
      // Notices sent while no connection listened are lost: local readers look again now.
      if (reconnecting) {
        log.info({ component: 'event-bus' }, 'the event bus reconnected to PostgreSQL')
        local.notify({ seq: 0, orgId: '', sessionId: null, type: RESYNC })
      }
      reconnecting = true
    } catch (err) {
      // The connect's own failure is what the caller hears of; ending its half-made client adds nothing.
      await c.end().catch(() => {})
      throw err
    }
  }
  let reconnecting = false
  try {
    await connect()
  } catch (err) {
    closed = true
    throw err
  }

  const send = (m: Message): void => {
    const text = JSON.stringify(m)
    const c = client
    if (text.length > MAX_PAYLOAD || !c) return
    sending = sending.then(() => c.query('SELECT pg_notify($1, $2)', [channel, text])).catch(logFailure(log, 'a NOTIFY to the other nodes failed', { component: 'event-bus' }))
  }
  const flush = () => {
    flushing = false
    // As many notices as fit in one payload, each measured once: a turn's thousands of notices
    // (a command's file changes) measured again for every payload held the event loop most of a second.
    const empty = JSON.stringify({ from: me, notices: [] }).length
    let notices: EventNotice[] = []
    let length = empty
    for (const n of pending) {
      const size = JSON.stringify(n).length
      // The comma before every notice but the first.
      if (notices.length > 0 && length + 1 + size > MAX_PAYLOAD) {
        send({ from: me, notices })
        notices = []
        length = empty
      }
      length += (notices.length > 0 ? 1 : 0) + size
      notices.push(n)
    }
    if (notices.length > 0) send({ from: me, notices })
    pending = []
  }

  return {
    notify(n) {
      local.notify(n)
      pending.push(n)
      if (!flushing) {
        flushing = true
        setImmediate(flush)
      }
    },
    subscribe: local.subscribe,
    publish(e) {
      local.publish(e)
      send({ from: me, transient: e })
    },
    subscribeTransient: local.subscribeTransient,
    command(c) {
      local.command(c)
      send({ from: me, command: c })
    },
    onCommand: local.onCommand,
    async close() {
      closed = true
      flush()
      const c = client
      client = null
      await c?.end().catch(logFailure(log, 'closing the event bus connection failed', { component: 'event-bus' }))
    },
  }
}
