import type { Deps } from '../deps.ts'
import type { StoredEvent } from '../events/events.store.ts'
import { RESYNC } from '../events/event-bus.ts'
import { WEBHOOK_EVENT_TYPES } from '../events/vocabulary.ts'
import { silentLog, type Log } from '../shared/log.ts'
import { attemptDelivery } from './attempt-delivery.ts'
import { claimedReader, type ClaimedRead, type ReadyDelivery } from './claimed-deliveries.ts'
import { claimDeliveries, markFailed, pendingDeliveries, rescheduleDelivery, type ClaimedDelivery, type DeliveryOutcome } from './deliveries.store.ts'
import { outcomeRecorder } from './outcome-recorder.ts'
import { deliverySender } from './send-delivery.ts'

export type DeliveryWorker = {
  /** Starts sending what is due, and keeps doing so; calling it again does nothing. */
  start(): void
  /** Stops claiming, gives in-flight attempts a moment, then aborts them uncounted; resolves once all have let go of the store. */
  close(): Promise<void>
}

export type DeliveryWorkerDeps = Pick<Deps, 'store' | 'bus' | 'config' | 'box'> & {
  /** Extra certificates to trust (tests' self-signed receivers); deployments use NODE_EXTRA_CA_CERTS. */
  ca?: string
  /** The service's logger; silent when not given. */
  log?: Log
}

export type DeliveryWorkerLimits = {
  /** Attempts in flight per subscription: a slow receiver holds at most this many. */
  perSubscription: number
  /** Attempts in flight in this process. */
  total: number
  /** Look for work this often even without a wake-up: another process may have enqueued it. */
  pollMs: number
}

export const DELIVERY_LIMITS: DeliveryWorkerLimits = { perSubscription: 4, total: 64, pollMs: 2000 }

/** How often a held `turn.completed` looks again at its turn's artifacts. */
const HOLD_RECHECK_MS = 250
/** A claim outlives the attempt's time-out by this much, so only a dead process's claim runs out. */
const LEASE_MARGIN_MS = 15_000
/** An attempt ends at least this long before its claim's lease, leaving time to record it. */
const LEASE_GUARD_MS = 5_000
/**
 * Deliveries of one subscription claimed ahead of its free lanes, and of all subscriptions: a
 * fast receiver's next attempts start as soon as lanes free up, from one claim and one read of
 * their events instead of one of each per attempt. Still leases: another process does not take
 * them, and one that waited so long that a whole attempt no longer fits in its lease goes back.
 */
const AHEAD = 32
const AHEAD_TOTAL = 1024
const CANDIDATES = 256
const MAX_ROUNDS = 32
const CLOSE_GRACE_MS = 1000

const webhookTypes = new Set<string>(WEBHOOK_EVENT_TYPES)

/**
 * Sends the webhook outbox. Deliveries are claimed from the store with a lease, so any number of
 * processes on one store share the work and a crashed one's claims are taken up after the lease;
 * everything about a delivery's schedule lives in its row, so a restart resumes it.
 */
export function deliveryWorker(deps: DeliveryWorkerDeps, limits: DeliveryWorkerLimits = DELIVERY_LIMITS): DeliveryWorker {
  const { store, bus, config, box } = deps
  const db = store.db
  const delays = config.webhookRetryDelaysMs
  const log = deps.log ?? silentLog
  const sender = deliverySender({ allowPrivate: config.allowPrivateWebhooks, timeoutMs: config.webhookTimeoutMs, maxSockets: limits.total, ca: deps.ca })
  const readClaimed = claimedReader(db, box, config.turnCompletedWaitMs)

  // Attempts in flight, claims being made counted in advance, so that the caps hold while they run.
  const bySubscription = new Map<string, number>()
  let inFlight = 0
  /** Attempts and claims under way: what close() waits for. */
  const running = new Set<Promise<void>>()
  const aborts = new Set<AbortController>()
  let started = false
  let closing = false
  let unsubscribe: (() => void) | null = null
  let timer: NodeJS.Timeout | null = null
  let timerAt = Infinity
  let pumping: Promise<void> | null = null
  let again = false
  /** The last pump stopped at the overall cap: a freed slot goes to whatever is due first, not back to its subscription. */
  let crowded = false
  /** Claimed, ready to go, not yet attempted (no lane was free), per subscription in claim order. */
  const ready = new Map<string, ReadyDelivery[]>()
  let readyTotal = 0
  /** How long each subscription's last attempt took: a slow receiver gets fewer claimed ahead. */
  const took = new Map<string, number>()
  /** Subscriptions with a claim ahead under way: one at a time each. */
  const claiming = new Set<string>()
  /**
   * The last look found nothing due of the subscriptions without deliveries claimed ahead: until
   * something may have changed that (a committed event, a timer), freed lanes go to what was
   * claimed ahead without looking again, a look that would read every claimed-ahead backlog.
   */
  let othersQuiet = false
  /**
   * Subscriptions whose last claim ahead came back short: nothing more of theirs was due, so their
   * finishing attempts do not claim again (and find nothing) until something may have changed it.
   * Cleared with othersQuiet: a committed event or a timer.
   */
  const drained = new Set<string>()
  /** Moves with every clearing of `drained`: a claim that began before one does not mark its subscription drained. */
  let wakes = 0
  const wake = () => {
    othersQuiet = false
    drained.clear()
    wakes++
  }
  const recorder = outcomeRecorder(db)

  const hold = (subscriptionId: string, n: number) => {
    inFlight += n
    const left = (bySubscription.get(subscriptionId) ?? 0) + n
    if (left === 0) bySubscription.delete(subscriptionId)
    else bySubscription.set(subscriptionId, left)
  }
  const held = (subscriptionId: string) => bySubscription.get(subscriptionId) ?? 0
  const track = (p: Promise<void>) => {
    running.add(p)
    void p.finally(() => running.delete(p))
  }
  const leaseFrom = (now: number) => now + config.webhookTimeoutMs + LEASE_MARGIN_MS
  const failed = (what: string) => (err: unknown) => log.warn({ err, component: 'webhooks' }, what)

  /** Runs the pump now, or once more after the running one: wake-ups coalesce. */
  const kick = () => {
    if (closing) return
    if (pumping) {
      again = true
      return
    }
    pumping = pump()
      .catch((err: unknown) => {
        failed('looking for due deliveries failed, trying again shortly')(err)
        arm(Date.now() + limits.pollMs)
      })
      .finally(() => {
        pumping = null
        if (again) {
          again = false
          kick()
        }
      })
  }

  /** Makes sure the pump wakes by `at`, and never later than one poll from now. */
  const arm = (at: number) => {
    if (closing) return
    const now = Date.now()
    const when = Math.min(at, now + limits.pollMs)
    if (timer && timerAt <= when) return
    if (timer) clearTimeout(timer)
    timerAt = when
    timer = setTimeout(() => {
      timer = null
      timerAt = Infinity
      wake()
      kick()
    }, Math.max(0, when - now))
    timer.unref()
  }

  const dueAt = (c: { attempts: number; nextAttemptAt: number }) => c.nextAttemptAt + (c.attempts === 0 ? delays[0]! : 0)

  /** Freed lanes go to deliveries claimed ahead. */
  const serveReady = () => {
    for (const sub of [...ready.keys()]) startReady(sub)
    crowded = inFlight >= limits.total
  }

  /**
   * Claims what is due, earliest first, up to the caps, before what was claimed ahead (so that a
   * subscription without lanes is not kept waiting by others' backlogs); then sleeps until the
   * next due delivery.
   */
  async function pump(): Promise<void> {
    for (let round = 0; round < MAX_ROUNDS; round++) {
      if (closing) return
      const free = limits.total - inFlight
      crowded = free <= 0
      // A finishing attempt pumps again; the poll is a backstop.
      if (crowded) return arm(Infinity)
      if (othersQuiet) return serveReady()
      // Subscriptions at their cap, or served from what is claimed ahead for them, are left out.
      const full = [...new Set([...[...bySubscription].filter(([, n]) => n >= limits.perSubscription).map(([id]) => id), ...ready.keys(), ...claiming])]
      const now = Date.now()
      const window = Math.min(CANDIDATES, free + 4 * limits.perSubscription)
      const candidates = await pendingDeliveries(db, full, window)
      const picked = new Map<string, string[]>()
      let count = 0
      let next = Infinity
      for (const c of candidates) {
        const due = dueAt(c)
        if (due > now) {
          next = Math.min(next, due)
          continue
        }
        const mine = picked.get(c.subscriptionId) ?? []
        if (count >= free || held(c.subscriptionId) + mine.length >= limits.perSubscription) continue
        picked.set(c.subscriptionId, [...mine, c.id])
        count++
      }
      if (count === 0) {
        othersQuiet = true
        serveReady()
        return arm(next)
      }
      for (const [sub, ids] of picked) hold(sub, ids.length)
      const lease = leaseFrom(now)
      const claimed = await claimDeliveries(db, store.dialect, { ids: [...picked.values()].flat() }, now, lease).catch((err: unknown) => {
        for (const [sub, ids] of picked) hold(sub, -ids.length)
        throw err
      })
      const won = new Set(claimed.map((c) => c.id))
      for (const [sub, ids] of picked) hold(sub, -ids.filter((id) => !won.has(id)).length)
      await launch(claimed, lease)
      // Another look when the window may have hidden more, or another process took some: the
      // subscriptions that just filled up are left out of it, so others get their turn.
      if (candidates.length < window && claimed.length === count) {
        serveReady()
        return arm(next)
      }
    }
    arm(Date.now())
  }

  /**
   * After an attempt: the subscription's next due deliveries, found through its index, are claimed
   * for its free lanes and AHEAD more, once what was claimed before runs low.
   */
  function refill(subscriptionId: string): void {
    const queued = ready.get(subscriptionId)?.length ?? 0
    if (closing || claiming.has(subscriptionId) || drained.has(subscriptionId) || queued >= limits.perSubscription) return
    // As many as its lanes get through in half the time a claimed one may wait: the rest would go back.
    const ahead = Math.min(AHEAD, Math.floor((limits.perSubscription * (LEASE_MARGIN_MS - LEASE_GUARD_MS)) / (2 * Math.max(1, took.get(subscriptionId) ?? 0))))
    const n = Math.min(limits.perSubscription - held(subscriptionId) + ahead - queued, AHEAD_TOTAL - readyTotal)
    if (n <= 0) return
    claiming.add(subscriptionId)
    const since = wakes
    const now = Date.now()
    const lease = leaseFrom(now)
    track(
      claimDeliveries(db, store.dialect, { subscriptionId, limit: n }, now, lease)
        .then((claimed) => {
          if (claimed.length < n && since === wakes) drained.add(subscriptionId)
          return launch(claimed, lease, false)
        })
        .catch(failed('claiming deliveries failed; the next look finds them'))
        .finally(() => claiming.delete(subscriptionId)),
    )
  }

  /** Starts the subscription's ready deliveries while it has free lanes; one whose lease no longer holds a whole attempt goes back. */
  function startReady(subscriptionId: string): void {
    const queue = ready.get(subscriptionId)
    while (queue && queue.length > 0 && !closing && held(subscriptionId) < limits.perSubscription && inFlight < limits.total) {
      const r = queue.shift()!
      readyTotal--
      if (Date.now() + config.webhookTimeoutMs > r.lease - LEASE_GUARD_MS) {
        // Due again at once: the subscription's next claim finds it.
        drained.delete(subscriptionId)
        track(recorder.record({ id: r.row.id, kind: 'rescheduled', lease: r.lease, at: Date.now() }).catch(failed(`giving delivery ${r.row.id} back failed; it is claimed again once its claim runs out`)))
        continue
      }
      hold(subscriptionId, 1)
      track(attempt(r))
    }
    if (queue?.length === 0) ready.delete(subscriptionId)
  }

  /** Gives back what was claimed ahead and not started: the service stops. */
  function dropReady(): void {
    const at = Date.now()
    for (const queue of ready.values()) for (const r of queue) track(recorder.record({ id: r.row.id, kind: 'rescheduled', lease: r.lease, at }).catch(failed(`giving delivery ${r.row.id} back failed; it is claimed again once its claim runs out`)))
    ready.clear()
    readyTotal = 0
  }

  /**
   * Queues each claimed delivery to be attempted and starts what free lanes allow, or gives it
   * back. `counted`: the claimer counted them in flight beforehand (the pump), to be let go here.
   */
  async function launch(claimed: ClaimedDelivery[], lease: number, counted = true): Promise<void> {
    if (claimed.length === 0) return
    let read: ClaimedRead
    try {
      read = await readClaimed(claimed, lease)
    } finally {
      // Read or not, they are no longer counted in flight: queued, given back, or (the read
      // failed) left to their leases, which run out so that they are claimed again.
      if (counted) for (const row of claimed) hold(row.subscriptionId, -1)
    }
    const touched = new Set<string>()
    for (const r of read.ready) {
      // The worker is closing: given back at once, like what is held.
      if (closing) {
        read.notNow.push({ row: r.row, event: r.event })
        continue
      }
      const queue = ready.get(r.row.subscriptionId) ?? []
      if (queue.length === 0) ready.set(r.row.subscriptionId, queue)
      queue.push(r)
      readyTotal++
      touched.add(r.row.subscriptionId)
    }
    // Not attempted now: held (turn.completed), the worker is closing, or its event is gone.
    for (const { row, event } of read.notNow) await giveBack(row, event, lease).catch(failed(`giving delivery ${row.id} back failed; it is claimed again once its claim runs out`))
    for (const sub of touched) startReady(sub)
    if (closing) dropReady()
  }

  /** A claimed delivery that is not attempted now: its event is gone (dead), or it is given back uncounted. */
  async function giveBack(row: ClaimedDelivery, event: StoredEvent | undefined, lease: number): Promise<void> {
    if (!event) return markFailed(db, row.id, lease, { attempts: row.attempts, error: `event ${row.eventSeq} is no longer stored`, at: Date.now(), nextAttemptAt: null })
    // The service stops, or the turn still publishes its artifacts (turn.completed waits for them).
    const at = closing ? Date.now() : Math.min(Date.now() + HOLD_RECHECK_MS, event.createdAt + config.turnCompletedWaitMs)
    await rescheduleDelivery(db, row.id, lease, at)
    arm(at)
  }

  async function attempt(d: ReadyDelivery): Promise<void> {
    const { row } = d
    const abort = new AbortController()
    aborts.add(abort)
    let outcome: DeliveryOutcome
    try {
      const sent = await attemptDelivery(sender, d, delays, abort.signal, d.lease - LEASE_GUARD_MS)
      outcome = sent.outcome
      if (took.size > 10_000) took.clear()
      took.set(row.subscriptionId, sent.tookMs)
    } catch (err) {
      return failed(`attempting delivery ${row.id} failed; it is tried again once its claim runs out`)(err)
    } finally {
      aborts.delete(abort)
      // The lane is free once the answer is in: the outcome is written with others' (the
      // delivery stays claimed until then, so no one sends it again meanwhile).
      hold(row.subscriptionId, -1)
      // At the overall cap the pump decides who gets the lane: whatever is due first.
      if (crowded) kick()
      else startReady(row.subscriptionId)
      // A subscription's next deliveries are claimed straight away only when first attempts are
      // due at once; with a first delay the pump, which applies it, decides.
      if (delays[0] === 0) refill(row.subscriptionId)
      else if (!crowded) kick()
    }
    try {
      await recorder.record(outcome)
      if (outcome.kind === 'failed' && outcome.nextAttemptAt !== null) arm(outcome.nextAttemptAt)
    } catch (err) {
      failed(`recording delivery ${row.id} failed; it is tried again once its claim runs out`)(err)
    }
  }

  return {
    start() {
      if (started || closing) return
      started = true
      // Committed webhook events are due at once; record-event notifies after the commit.
      unsubscribe = bus.subscribe((n) => {
        if (!webhookTypes.has(n.type) && n.type !== RESYNC) return
        wake()
        kick()
      })
      kick()
    },
    async close() {
      closing = true
      unsubscribe?.()
      if (timer) clearTimeout(timer)
      await pumping
      if (running.size > 0) {
        let grace: NodeJS.Timeout | undefined
        await Promise.race([Promise.allSettled([...running]), new Promise((r) => (grace = setTimeout(r, Math.min(CLOSE_GRACE_MS, config.webhookTimeoutMs))))])
        clearTimeout(grace)
      }
      dropReady()
      for (const a of aborts) a.abort()
      while (running.size > 0) await Promise.allSettled([...running])
      sender.close()
    },
  }
}
