import type { Deps } from '../deps.ts'
import type { Log } from '../shared/log.ts'
import { ApiError } from '../errors.ts'
import { withEvents } from '../events/record-event.ts'
import { getSessionRowById, storedAgentOf } from '../sessions/sessions.store.ts'
import { ConversationView } from './conversation-view.ts'
import { ModelConnections } from './model-connections.ts'
import { providerFetch } from './provider-fetch.ts'
import { EarlyWindow } from './early-window.ts'
import { expiredApprovals, resolvePendingCall } from '../turns/pending-calls.store.ts'
import { undeliveredSteers } from '../turns/steers.store.ts'
import { requestCancel, workingTurns, type TurnRow } from '../turns/turns.store.ts'
import { SandboxImageError, SandboxPathError, SandboxUnavailableError } from '../sandbox/sandbox.ts'
import { isStoreUnreachable } from '../db/database.ts'
import { agentStep, TurnFailure } from './agent-step.ts'
import { openToolCalls } from './open-calls.ts'
import { handleOpenCalls, type TurnScope } from './run-calls.ts'
import { beginTurn, settleTurn, type Settlement } from './turn-lifecycle.ts'
import type { TurnCtx } from './turn-write.ts'
import { checkFence, fenceFor, LostOwnership } from '../nodes/ownership.store.ts'
import { mcpHub } from '../mcp/mcp-hub.ts'
import { browserHub } from '../tools/browser/browser-hub.ts'

export type TurnRunner = {
  /** Makes sure the session's turns are being driven (a new message, an answer, a restart). */
  kick(sessionId: string): void
  /** Cancels a working turn: a waiting one never starts; a running one stops and its tools are killed. */
  cancel(sessionId: string, turnId: string): Promise<void>
  /** Stops driving the session without writing anything more (it is being deleted). */
  forget(sessionId: string): void
  /** Resolves when nothing drives the session (tests and benchmarks wait on it). */
  settled(sessionId: string): Promise<void>
  /** The node lost its leases: every driver stops where it is, writing nothing more. */
  abandon(): void
  close(): Promise<void>
}

/** Why a turn's work was cut: each reason settles differently. */
type Stop = { stop: 'cancel' | 'lifetime'; turnId: string } | { stop: 'forget' | 'close'; turnId?: undefined }
const isStop = (v: unknown): v is Stop => typeof v === 'object' && v !== null && 'stop' in v

const duration = (ms: number) => (ms < 1000 ? `${ms} ms` : `${Math.round(ms / 1000)} s`)

/**
 * `current`: the started turn being driven now, which an abort is aimed at. `ending`: aborted when
 * this node lets go of the session for another to take up (close, abandon), a publication in
 * progress included.
 */
type Driver = { controller: AbortController; ending: AbortController; again: boolean; done: Promise<void>; current: string | null }

/**
 * Drives turns. One driver per session at a time runs its working turns in order, one model step
 * or tool call at a time, each persisted before the next; a turn parked on a person or the
 * caller holds no driver at all: answering it kicks the runner again. Everything it needs to go on
 * is in the store, so a restarted service continues where the last one stopped.
 */
export type RunnerDeps = Pick<Deps, 'store' | 'bus' | 'config' | 'box' | 'workspaces' | 'metrics'> & {
  /**
   * Publishes a settled turn's files; the driver waits for it before the session's next turn.
   * `signal`: the driver lets go of the session (the service stops): the publication ends where
   * it is and stays pending, for whoever takes the session up next.
   */
  publish(turn: { id: string; session_id: string; org_id: string }, signal: AbortSignal): Promise<void>
  /** The service's logger. */
  log: Log
  /** This node's id: approvals time out here only for the sessions it owns. */
  nodeId(): string
  /** Whether this node holds its leases now (see ServiceNode.holdsLeases); live deltas go out only then. */
  leaseHeld?: () => true | Promise<boolean>
}

export function turnRunner(runnerDeps: RunnerDeps): TurnRunner {
  const { store, config, workspaces } = runnerDeps
  // The session's MCP servers stay connected between steps and turns of this process.
  const mcp = mcpHub({
    box: runnerDeps.box,
    allowPrivate: config.allowPrivateMcp,
    spawn: async (sessionId, req) => (await workspaces.acquire(sessionId)).spawn(req),
    log: runnerDeps.log,
  })
  // The session's browser (browse, browser_act, screenshot) lives until the workspace pauses.
  const browser = browserHub({ log: runnerDeps.log })
  // One for the runner: its agent keeps the model servers' connections alive across drivers.
  const modelFetch = providerFetch(config.modelAllowPrivate)
  // A paused workspace keeps nothing open: its browser closes, its MCP servers are disconnected
  // (a local one would only sit frozen); both come back on the next use.
  workspaces.onPause(async (sessionId) => {
    await browser.close(sessionId)
    await mcp.forget(sessionId)
  })
  const deps = { ...runnerDeps, mcp, browser }
  const drivers = new Map<string, Driver>()
  const seen = new Map<string, Map<string, string>>()
  const seenBy = new Map<string, string>()
  let closing = false

  const failureOf = (err: unknown): Settlement => {
    if (err instanceof TurnFailure) return { status: 'failed', error: err.error }
    if (err instanceof ApiError && (err.code === 'sandbox_unavailable' || err.code === 'workspace_recovery_failed' || err.code === 'sandbox_error')) {
      return { status: 'failed', error: { code: err.code, message: err.message } }
    }
    // The workspace's image could not be had: its bring-up answered a 400 (the session's to change)
    // and recorded workspace.recovery_failed; the turn fails as one whose workspace is unavailable.
    if (err instanceof ApiError && err.cause instanceof SandboxImageError) return { status: 'failed', error: { code: 'sandbox_unavailable', message: err.message } }
    if (err instanceof SandboxUnavailableError || err instanceof SandboxPathError) return { status: 'failed', error: { code: 'sandbox_error', message: err.message } }
    runnerDeps.log.error({ err, component: 'runner' }, 'a turn failed on an unexpected error')
    return { status: 'failed', error: { code: 'internal_error', message: 'The turn failed on an unexpected error; quote the turn id when reporting it.' } }
  }

  type Ctx = typeof deps & TurnCtx

  /** One move of the turn: its open tool calls, or else a model step. */
  async function advance(ctx: Ctx, scope: TurnScope): Promise<'parked' | 'continue' | 'done'> {
    const convo = await scope.conversation.read()
    const open = openToolCalls(convo, scope.turn.id)
    if (open.length) return handleOpenCalls(ctx, scope, open)
    const last = convo.at(-1)
    const answered = last?.turnId === scope.turn.id && last.message.role === 'assistant'
    if (answered && (await undeliveredSteers(store.db, scope.turn.id)).length === 0) return 'done'
    const step = await agentStep(ctx, scope)
    // Text steered in meanwhile is caught by settleTurn, which then leaves the turn open.
    return step.toolCalls.length === 0 ? 'done' : 'continue'
  }

  async function drive(sessionId: string, d: Driver): Promise<void> {
    // Every write of this driver is fenced by the holding of the lease it started under.
    const fence = await fenceFor(store.db, sessionId, runnerDeps.nodeId())
    if (!fence) return
    const ctx: Ctx = { ...deps, fence }
    const release = workspaces.hold(sessionId)
    // Read whole once per driver, then only what each move added.
    const conversation = new ConversationView(store, sessionId)
    const models = new ModelConnections(store.db, runnerDeps.box, modelFetch)
    const early = new EarlyWindow((id) => workspaces.live(id))
    try {
      for (;;) {
        d.again = false
        // Before each move, not only at its write: a node that lost the session asks no model again.
        await checkFence(store.db, store.dialect, fence, false)
        const [turn] = await workingTurns(store.db, sessionId)
        if (!turn) return
        // An abort meant for an earlier turn (it settled meanwhile) must not cut this one.
        const pending = d.controller.signal.reason as Stop | undefined
        if (d.controller.signal.aborted && pending?.turnId !== turn.id && pending?.stop !== 'forget' && pending?.stop !== 'close') d.controller = new AbortController()
        if (turn.cancel_requested) {
          await settle(ctx, turn, { status: 'cancelled' }, d.ending.signal)
          continue
        }
        if (turn.started_at === null) {
          // Input wakes the workspace: it comes up while the model thinks about its first step.
          workspaces.start(sessionId)
          await beginTurn(ctx, turn)
          continue
        }
        const session = await getSessionRowById(store.db, sessionId)
        if (!session) return
        const agent = storedAgentOf(session)
        if (!seen.has(turn.id)) (seen.set(turn.id, new Map()), seenBy.set(turn.id, sessionId))
        d.current = turn.id
        const scope: TurnScope = { turn, agent, signal: d.controller.signal, seen: seen.get(turn.id)!, conversation, models, early }
        let outcome: 'parked' | 'continue' | 'done'
        try {
          outcome = await advance(ctx, scope)
        } catch (err) {
          early.drop()
          // Another node holds the session now: it settles what this one leaves.
          if (err instanceof LostOwnership) throw err
          const reason = d.controller.signal.aborted ? d.controller.signal.reason : null
          if (isStop(reason) && (reason.turnId === turn.id || reason.stop === 'forget' || reason.stop === 'close')) {
            if (reason.stop === 'forget' || reason.stop === 'close') return
            d.controller = new AbortController()
            if (reason.stop === 'lifetime') {
              await settle(ctx, turn, { status: 'failed', error: { code: 'sandbox_error', message: `The workspace reached its lifetime ceiling of ${duration(config.workspaceLifetimeMs)} and was reclaimed while the turn ran.` } }, d.ending.signal)
            }
            continue // a cancel is settled at the top of the loop
          }
          // A store that cannot be reached fails nothing: the driver starts over from the store.
          // A turn's own failure is never that, whatever its message quotes (a refused connection
          // to a provider or a tool server reads much like one to the store).
          if (!(err instanceof TurnFailure) && isStoreUnreachable(err)) throw err
          await settle(ctx, turn, failureOf(err), d.ending.signal)
          continue
        }
        if (outcome === 'parked') {
          if (!d.again) return
          continue
        }
        // A steer that arrived meanwhile keeps the turn open (settleTurn checks, in its transaction).
        if (outcome === 'done') await settle(ctx, turn, { status: 'completed' }, d.ending.signal)
      }
    } finally {
      early.drop()
      release()
    }
  }

  /** `ending`: the settling driver lets go of the session (see RunnerDeps.publish). */
  async function settle(ctx: TurnCtx, turn: TurnRow, s: Settlement, ending: AbortSignal): Promise<void> {
    // What the turn changed is stored where every node reaches it before the turn is reported
    // settled: a node lost right after must not take back a turn its caller saw complete.
    if (ctx.fence) await workspaces.keep(turn.session_id, ctx.fence, { restore: s.status === 'completed' })
    if (await settleTurn(ctx, turn, s)) {
      runnerDeps.metrics.turnsSettled.inc({ outcome: s.status })
      seen.delete(turn.id)
      seenBy.delete(turn.id)
      // The files are the ones the turn left: the next turn of the session starts only after.
      await deps.publish(turn, ending)
    }
  }

  function kick(sessionId: string): void {
    if (closing) return
    const running = drivers.get(sessionId)
    if (running) {
      running.again = true
      return
    }
    const d: Driver = { controller: new AbortController(), ending: new AbortController(), again: false, done: Promise.resolve(), current: null }
    drivers.set(sessionId, d)
    runnerDeps.metrics.turnsWorking.inc()
    d.done = drive(sessionId, d)
      .catch((err) => {
        if (err instanceof LostOwnership) {
          // Nothing to retry: the node that holds the session now drives it.
          runnerDeps.log.warn({ component: 'runner', session_id: sessionId }, `stopped driving the session: ${err.message}`)
          return
        }
        runnerDeps.log.error({ err, component: 'runner', session_id: sessionId }, 'driving the session failed, retrying shortly')
        // The store is the truth: a driver that died on it (a lost connection) starts over from there.
        setTimeout(() => kick(sessionId), 1000).unref()
      })
      .finally(() => {
        if (drivers.get(sessionId) === d) drivers.delete(sessionId)
        runnerDeps.metrics.turnsWorking.dec()
        // A kick that arrived while the driver was finishing must not be lost.
        if (d.again && !closing) kick(sessionId)
      })
  }

  const onReclaimed = (sessionId: string) => {
    const d = drivers.get(sessionId)
    if (d?.current) d.controller.abort({ stop: 'lifetime', turnId: d.current } satisfies Stop)
  }
  workspaces.reclaimed.on('reclaimed', onReclaimed)

  // Approvals nobody answered in time are refused with approval_timeout.
  const sweep = async () => {
    for (const call of await expiredApprovals(store.db, Date.now(), runnerDeps.nodeId())) {
      const resolved = await withEvents(store, deps.bus, async (trx, record) => {
        const reason = `Nobody answered the approval request within ${duration(config.approvalTimeoutMs)}.`
        if (!(await resolvePendingCall(trx, call.sessionId, call.callId, { approved: false, code: 'approval_timeout', reason }, Date.now()))) return false
        await record({ orgId: call.orgId, sessionId: call.sessionId, turnId: call.turnId, type: 'approval.resolved', payload: { toolCallId: call.callId, approved: false, name: call.name, code: 'approval_timeout', reason } })
        return true
      })
      if (resolved) kick(call.sessionId)
    }
  }
  const sweeper = setInterval(() => void sweep().catch((err) => runnerDeps.log.warn({ err, component: 'runner' }, 'sweeping timed-out approvals failed')), Math.max(10, Math.min(1000, Math.floor(config.approvalTimeoutMs / 4))))
  sweeper.unref()

  return {
    kick,
    async cancel(sessionId, turnId) {
      await requestCancel(store.db, turnId)
      const working = await workingTurns(store.db, sessionId)
      const target = working.find((t) => t.id === turnId)
      if (!target) return
      // A waiting turn never starts: it settles now, and the running one is left alone.
      if (target !== working[0]) {
        // Outside any driver: the turn never ran, and leaves nothing to publish but what it finds.
        await settle(deps, target, { status: 'cancelled' }, new AbortController().signal)
        return
      }
      const d = drivers.get(sessionId)
      if (!d) return kick(sessionId)
      if (target.started_at !== null) d.controller.abort({ stop: 'cancel', turnId } satisfies Stop)
      d.again = true
    },
    forget(sessionId) {
      drivers.get(sessionId)?.controller.abort({ stop: 'forget' } satisfies Stop)
      for (const [t, s] of seenBy) if (s === sessionId) (seen.delete(t), seenBy.delete(t))
      void mcp.forget(sessionId)
      void browser.close(sessionId)
    },
    async settled(sessionId) {
      while (drivers.has(sessionId)) await drivers.get(sessionId)!.done
    },
    abandon() {
      // Another node takes the sessions up, and publishes what is left pending.
      for (const d of drivers.values()) d.ending.abort()
      for (const id of [...drivers.keys()]) this.forget(id)
    },
    async close() {
      closing = true
      clearInterval(sweeper)
      workspaces.reclaimed.off('reclaimed', onReclaimed)
      for (const d of drivers.values()) {
        d.controller.abort({ stop: 'close' } satisfies Stop)
        d.ending.abort()
      }
      await Promise.allSettled([...drivers.values()].map((d) => d.done))
      await mcp.close()
      await browser.closeAll()
    },
  }
}
