import { randomBytes, timingSafeEqual } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import type { Store } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import type { EventBus, NodeCommand } from '../events/event-bus.ts'
import type { Log } from '../shared/log.ts'
import type { Metrics } from '../shared/metrics.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import { requestCancel } from '../turns/turns.store.ts'
import { joinNode, type HostResources } from './join-node.ts'
import { beat, declareDead, markStopped, pruneNodes, readNodes, setNodeUrl, type NodeRow } from './nodes.store.ts'
import { claimFromDead, claimSession, dropDeletedOwnership, ownerEvenDeleted, ownerlessSessions, ownerOf, releaseSession, sessionsWithWork } from './ownership.store.ts'

/**
 * Where a session's work happens: on this node, on a live peer (its address: empty while the peer
 * does not listen, so that only commands on the bus reach it), or nowhere (no such live session).
 */
export type Location = { here: true } | { here: false; nodeId: string; url: string } | null

/** A peer a request is passed on to, or the node it cannot reach. */
export type PassOn = { nodeId: string; url: string; secret: string } | { nodeId: string; unreachable: true }

/** A peer as health and the start-up log show it. */
export type Peer = { id: string; url: string; host: string; started_at: number; heartbeat_at: number; live: boolean }

/** What this node does to a session it owns: the runner's and the workspace manager's local moves. */
export type LocalWork = {
  kick(sessionId: string): void
  cancel(sessionId: string, turnId: string): Promise<void>
  /** The session was deleted: stop driving it and remove its sandbox and files on this node. */
  deleted(sessionId: string): Promise<void>
  /**
   * Takes up a session this node just claimed: whatever its last owner left running is gone, so its
   * workspace state and open usage are set right, unpublished files published and its turns
   * driven. Resolves true when something of it lives on here (a workspace owed, a turn working).
   */
  adopt(sessionId: string): Promise<boolean>
  /** The node lost its leases (declared dead, or cut from the store too long): drop everything, write nothing. */
  abandon(): Promise<void>
}

/**
 * This process as a node of the service: it owns the sessions whose lease it holds, renews them
 * all with one heartbeat, takes over the sessions of nodes whose heartbeat lapsed, and routes
 * every move on a session to the node that owns it (a command on the bus; the intent itself is
 * already in the store).
 */
export type ServiceNode = {
  readonly id: string
  /** Where the session's work happens; a session nobody live holds is claimed for this node first. */
  locate(sessionId: string): Promise<Location>
  /**
   * Before the workspace manager brings a session's sandbox up: the live peer that runs it, since
   * a second sandbox of one workspace must never come up here; null when this node owns the
   * session (claiming it when nobody live does), or there is no such session.
   */
  ownerElsewhere(sessionId: string): Promise<string | null>
  /**
   * Where a request that acts on the session's workspace goes: null, served here (this node owns
   * the session, or there is no such session); a live peer's address and the secret to show it;
   * or unreachable, when a peer runs it but no address or secret of it is known, or the request
   * was passed on already (it is never passed on twice).
   */
  passOnTarget(sessionId: string, headers: Record<string, string | string[] | undefined>): Promise<PassOn | null>
  /** True when the request was passed on by a peer (it shows this node's secret in NODE_HEADER). */
  passedOn(headers: Record<string, string | string[] | undefined>): boolean
  /**
   * The identity a session created here is owned by, once this node is sure of its leases: a node
   * woken past its lease (a pause) renews its heartbeat first, or joins again as a new node, and
   * never names a new session with the identity it lost. Refuses with sandbox_unavailable while it
   * cannot reach the store. The create checks the answer again in its transaction (nodeIsLive).
   */
  creator(): Promise<string>
  /**
   * Whether this node may act as an owner at this moment: true at once when it renewed its leases
   * recently enough; otherwise (a node woken after a pause, or one slowed by load) it renews first
   * and resolves true only when it still holds them under the identity it had when asked.
   */
  holdsLeases(): true | Promise<boolean>
  /** Drives the session's turns wherever it is owned. */
  kick(sessionId: string): void
  /** Cancels the turn: the request is stored here, the owner stops what runs. */
  cancel(sessionId: string, turnId: string): Promise<void>
  /** After a deletion's commit: the owner lets go of the sandbox and files. */
  deleted(sessionId: string): Promise<void>
  peers(): Peer[]
  /** Joins the store's nodes (refusing overlaps) before anything touches the host. */
  join(): Promise<void>
  /** Once the app is ready: tells peers where it listens (if it does) and takes up what is owed to it. */
  started(url: string): Promise<void>
  /** Where peers reach this node, when it listens only after start (tests); WARREN_NODE_URL wins. */
  advertise(url: string): Promise<void>
  /** A graceful stop: marks the node stopped so that its sessions are taken over at once. */
  leave(): Promise<void>
}

export type NodeDeps = {
  store: Store
  bus: EventBus
  log: Log
  metrics: Metrics
  leaseMs: number
  resources: HostResources
  url: string | undefined
  local: LocalWork
  /** The deployment's box: a node's secret is kept sealed in its row, as every secret at rest is. */
  box: SecretBox
}

const CLAIM_BATCH = 20
/** The header a node passing a request on to the owner sets to the owner's secret. */
export const NODE_HEADER = 'x-warren-node-secret'
/** A node that could not renew its heartbeat for this share of the lease stops acting as an owner. */
const FENCE_SHARE = 2 / 3

export function serviceNode(deps: NodeDeps): ServiceNode {
  const { store, bus, log, leaseMs, local } = deps
  let id = ''
  let url = deps.url ?? ''
  // Made anew by each start: a peer learns it from the node's row (sealed there: whoever reads the
  // store without the deployment's key learns nothing to pose as a node with), a caller never sees it.
  const secret = randomBytes(24).toString('base64url')
  const secretBytes = Buffer.from(secret)
  const sealedSecret = deps.box.seal(secret)
  /** A peer's secret from its row; undefined when there is none or it opens under no key of ours. */
  const openSecret = (sealed: string | null | undefined): string | undefined => {
    if (!sealed) return undefined
    try {
      return deps.box.open(sealed)
    } catch {
      return undefined
    }
  }
  let view: { now: number; rows: NodeRow[] } = { now: 0, rows: [] }
  let lastBeat = performance.now()
  let fenced = false
  let ticks = 0
  let stopped = false
  let timer: NodeJS.Timeout | null = null
  let ticking: Promise<void> = Promise.resolve()
  let renewing: Promise<void> | null = null
  const adopting = new Map<string, Promise<boolean>>()

  const alive = (row: NodeRow) => row.stopped_at === null && view.now - row.heartbeat_at < leaseMs
  /** A live peer's row by this node's view, or null. */
  const livePeer = (nodeId: string) => {
    const row = view.rows.find((r) => r.id === nodeId)
    return row && row.id !== id && alive(row) ? row : null
  }

  /** One adoption per session at a time; a second caller waits for the first. */
  const adopt = (sessionId: string): Promise<boolean> => {
    let p = adopting.get(sessionId)
    if (!p) {
      p = local.adopt(sessionId).finally(() => adopting.delete(sessionId))
      adopting.set(sessionId, p)
    }
    return p
  }

  async function takeUp(sessionId: string, releaseIdle: boolean): Promise<void> {
    const keep = await adopt(sessionId)
    if (!keep && releaseIdle) await releaseSession(store.db, sessionId, id)
  }
  /**
   * Takes a session the round claimed up outside the round: an adoption (publishing what a lost
   * node left pending, bringing a workspace back) may last longer than the heartbeat the round
   * renews may wait, and a node busy taking over must not be declared dead for it. A failure is
   * logged; the owner's look at its sessions with work, every tenth round, drives them again.
   */
  const takeUpLater = (sessionId: string, releaseIdle: boolean): void =>
    void takeUp(sessionId, releaseIdle).catch((err) => log.error({ err, component: 'node', node_id: id, session_id: sessionId }, 'taking up a session failed'))

  async function locate(sessionId: string): Promise<Location> {
    for (let attempt = 0; attempt < 2; attempt++) {
      const owner = await ownerOf(store.db, sessionId)
      if (owner === undefined) return null
      if (owner === id && !fenced) return { here: true }
      const there = owner ? livePeer(owner) : null
      if (there) return { here: false, nodeId: there.id, url: there.url }
      if (!fenced && (await claimSession(store.db, store.dialect, sessionId, id, leaseMs))) {
        await adopt(sessionId)
        return { here: true }
      }
      // Someone live holds it whom this node's view does not know yet: look again.
      await refresh()
    }
    throw new Error(`session ${sessionId} is held by a node this one cannot reach`)
  }

  async function advertise(listenUrl: string): Promise<void> {
    if (deps.url) return
    url = listenUrl
    await setNodeUrl(store.db, id, url)
  }

  const send = (c: Omit<NodeCommand, 'to'>, to: string) => bus.command({ ...c, to })

  async function route(c: Omit<NodeCommand, 'to'>, hops = 0): Promise<void> {
    const where = await locate(c.sessionId)
    if (!where) return
    if (!where.here) return hops < 2 ? send(c, where.nodeId) : undefined
    if (c.kind === 'kick') local.kick(c.sessionId)
    else if (c.kind === 'cancel') await local.cancel(c.sessionId, c.turnId!)
  }

  const onCommand = (c: NodeCommand) => {
    if (c.to !== id || stopped) return
    const work = c.kind === 'deleted' ? deletedHere(c.sessionId) : route(c, 1)
    void work.catch((err) => log.error({ err, component: 'node', session_id: c.sessionId }, `acting on a ${c.kind} command failed`))
  }
  const offCommand = bus.onCommand(onCommand)

  async function deletedHere(sessionId: string): Promise<void> {
    await local.deleted(sessionId)
    await releaseSession(store.db, sessionId, id)
  }

  function passedOn(headers: Record<string, string | string[] | undefined>): boolean {
    const shown = headers[NODE_HEADER]
    if (typeof shown !== 'string' || shown.length !== secret.length) return false
    return timingSafeEqual(Buffer.from(shown), secretBytes)
  }

  async function refresh(): Promise<void> {
    const { now, nodes } = await readNodes(store.db, store.dialect)
    view = { now, rows: nodes }
  }

  /** Lost the leases: everything local goes, and the node comes back as a new one. */
  async function rejoin(why: string): Promise<void> {
    log.error({ component: 'node', node_id: id }, `this node lost its leases (${why}); dropping its sandboxes and joining again`)
    fenced = true
    await local.abandon()
    await markStopped(store.db, store.dialect, id).catch((err) => log.warn({ err, component: 'node', node_id: id }, 'marking the lost node stopped failed; peers see its heartbeat lapse instead'))
    id = await joinNode(store, deps.resources, { leaseMs, url, secret: sealedSecret })
    deps.metrics.setNodeId(id)
    lastBeat = performance.now()
    fenced = false
    log.info({ component: 'node', node_id: id }, 'joined again as a new node')
  }

  async function tick(): Promise<void> {
    // A round asked for after a graceful stop would find the node stopped and join it again.
    if (stopped) return
    ticks++
    try {
      if (!(await beat(store.db, store.dialect, id))) return await rejoin('another node declared it dead')
      lastBeat = performance.now()
    } catch (err) {
      if (!fenced && performance.now() - lastBeat > leaseMs * FENCE_SHARE) {
        fenced = true
        log.error({ err, component: 'node', node_id: id }, 'the store has not answered for most of the lease: this node stops acting as an owner')
        await local.abandon()
      }
      return
    }
    if (fenced) return await rejoin('it could not renew its heartbeat in time')
    await refresh()
    let declared = false
    for (const row of view.rows) {
      if (row.id !== id && row.stopped_at === null && !alive(row) && (await declareDead(store.db, store.dialect, row.id, leaseMs))) {
        declared = true
        log.warn({ component: 'node', node_id: id, dead_node: row.id }, 'declared a node dead: its heartbeat lapsed')
      }
    }
    // Read again only when a row changed: its stopped_at is what the takeover below goes by.
    if (declared) await refresh()
    const dead = view.rows.filter((r) => r.stopped_at !== null).map((r) => r.id)
    if (dead.length) {
      await dropDeletedOwnership(store.db, dead)
      for (let batch = 0; batch < 5; batch++) {
        const taken = await claimFromDead(store.db, store.dialect, id, dead, CLAIM_BATCH)
        for (const s of taken) takeUpLater(s, true)
        if (taken.length) deps.metrics.leaseTakeovers.inc(taken.length)
        if (taken.length) log.info({ component: 'node', node_id: id, sessions: taken.length }, 'took over sessions of stopped or dead nodes')
        if (taken.length < CLAIM_BATCH) break
      }
    }
    for (const s of await sessionsWithWork(store.db, null, CLAIM_BATCH)) {
      if (await claimSession(store.db, store.dialect, s, id, leaseMs)) takeUpLater(s, false)
    }
    if (ticks % 10 === 0) {
      await pruneNodes(store.db)
      // A command lost on the bus leaves a turn undriven: every so often the owner looks itself.
      for (const s of await sessionsWithWork(store.db, id)) local.kick(s)
    }
  }

  /**
   * One round at a time, whoever asks for it (the start, the timer, an act that found the lease
   * stale). Rejects with the round's failure, which is logged once whoever asked.
   */
  const round = (): Promise<void> => {
    const next = ticking.then(tick)
    ticking = next.catch((err) => log.error({ err, component: 'node', node_id: id }, 'a node round failed'))
    return next
  }
  /** A round whose failure the caller judges by `sure()` afterwards. */
  const renew = () => round().catch(() => {}) // logged by round() itself (ticking); the caller asks sure()
  /** Whether the last renewal is recent enough to act as an owner without renewing first. */
  const sure = () => !fenced && performance.now() - lastBeat < leaseMs * FENCE_SHARE

  const schedule = () => {
    if (stopped) return
    timer = setTimeout(() => void renew().finally(schedule), Math.max(100, Math.floor(leaseMs / 5)))
    timer.unref()
  }

  return {
    get id() {
      return id
    },
    locate,
    async ownerElsewhere(sessionId) {
      // Before it joins a node owns nothing, and must claim nothing under no identity.
      if (!id) return null
      const where = await locate(sessionId)
      return where && !where.here ? where.nodeId : null
    },
    async passOnTarget(sessionId, headers) {
      const where = await locate(sessionId)
      if (!where || where.here) return null
      const peerSecret = openSecret(livePeer(where.nodeId)?.secret)
      if (passedOn(headers) || !where.url || !peerSecret) return { nodeId: where.nodeId, unreachable: true }
      return { nodeId: where.nodeId, url: where.url, secret: peerSecret }
    },
    passedOn,
    holdsLeases() {
      // Before it joins a node owns nothing to act on; once it left, nothing may renew it.
      if (!id) return true
      if (stopped) return Promise.resolve(false)
      if (sure()) return true
      const before = id
      // One renewal for every act that asks meanwhile (a stream's deltas ask at each chunk).
      renewing ??= renew().finally(() => (renewing = null))
      return renewing.then(() => sure() && id === before)
    },
    async creator() {
      if (!sure() && !stopped) await renew()
      if (!sure()) throw new ApiError('sandbox_unavailable', 'This node cannot renew its place in the service now (the store does not answer in time); retry shortly, or through another node.')
      return id
    },
    kick(sessionId) {
      void route({ kind: 'kick', sessionId }).catch((err) => log.error({ err, component: 'node', session_id: sessionId }, 'routing a kick failed'))
    },
    async cancel(sessionId, turnId) {
      // Stored first wherever the owner is: the command only wakes it.
      await requestCancel(store.db, turnId)
      await route({ kind: 'cancel', sessionId, turnId })
    },
    async deleted(sessionId) {
      const owner = await ownerEvenDeleted(store.db, sessionId)
      const there = owner ? livePeer(owner) : null
      if (there) return send({ kind: 'deleted', sessionId }, there.id)
      await deletedHere(sessionId)
    },
    peers: () => view.rows.map((r) => ({ id: r.id, url: r.url, host: r.host, started_at: r.started_at, heartbeat_at: r.heartbeat_at, live: alive(r) })),
    async join() {
      id = await joinNode(store, deps.resources, { leaseMs, url, secret: sealedSecret })
      deps.metrics.setNodeId(id)
      lastBeat = performance.now()
    },
    advertise,
    async started(listenUrl) {
      if (listenUrl) await advertise(listenUrl)
      await refresh()
      const peers = view.rows.filter((r) => r.id !== id && alive(r)).map((r) => `${r.id} (${r.url || 'no address'})`)
      log.info({ component: 'node', node_id: id, url, peers }, `node ${id} joined the service${peers.length ? ` beside ${peers.join(', ')}` : ' as its only live node'}`)
      // The first node after a start from before leases (or alone after everyone stopped) takes
      // up what nobody owns but was left running.
      if (!view.rows.some((r) => r.id !== id && alive(r))) {
        for (const s of await ownerlessSessions(store.db)) if (await claimSession(store.db, store.dialect, s, id, leaseMs)) await takeUp(s, true)
      }
      await round()
      // What the first round took up (a predecessor's sessions) is up before the start is done:
      // what a stop left pending is published by then. Later rounds do not wait for theirs.
      await Promise.allSettled(adopting.values())
      schedule()
    },
    async leave() {
      stopped = true
      if (timer) clearTimeout(timer)
      offCommand()
      await ticking
      // Adoptions the rounds started run on their own: they end before the node says it stopped.
      await Promise.allSettled(adopting.values())
      if (id) await markStopped(store.db, store.dialect, id).catch((err) => log.warn({ err, component: 'node', node_id: id }, 'marking this node stopped failed; peers see its heartbeat lapse instead'))
    },
  }
}
