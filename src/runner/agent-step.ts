import { setTimeout as sleep } from 'node:timers/promises'
import type { Deps } from '../deps.ts'
import type { LiveEventName } from '../events/events.schema.ts'
import { turnWrite, type TurnCtx } from './turn-write.ts'
import { checkFence } from '../nodes/ownership.store.ts'
import type { ModelMessage } from 'ai'
import { appendConversation, compactConversation, estimateTokens } from '../turns/conversation.store.ts'
import { markSteersDelivered, undeliveredSteers } from '../turns/steers.store.ts'
import type { TurnError } from '../turns/turns.schema.ts'
import { turnEventScope } from '../turns/turns.store.ts'
import { WORKSPACE_MOUNT } from '../workspaces/workspace-manager.ts'
import { offeredTools, toolKind, toolsInPlay } from './agent-tools.ts'
import type { McpHub, McpUnavailable } from '../mcp/mcp-hub.ts'
import { planCompaction } from './compaction.ts'
import { agentInstructions } from './instructions.ts'
import { contextWindow, maxOutputTokens } from './language-model.ts'
import { ProviderFailure, runModelStep, type StepResult } from './model-step.ts'
import { recordStep } from './record-step.ts'
import { takenCallIds, withFreshCallIds } from './call-ids.ts'
import type { TurnScope } from './run-calls.ts'

type Ctx = Pick<Deps, 'store' | 'bus' | 'config' | 'metrics'> & TurnCtx & { mcp: McpHub }

/** A turn that cannot go on, with the code and message it fails with. */
export class TurnFailure extends Error {
  readonly error: TurnError
  constructor(error: TurnError) {
    super(error.message)
    this.error = error
  }
}

/**
 * One model step of a turn: steered text joins the conversation, the conversation is compacted
 * when it nears the model's window, the model is called (retrying what may pass), and the
 * step is persisted before the runner acts on it.
 */
export async function agentStep(ctx: Ctx, scope: TurnScope): Promise<StepResult> {
  const { turn, agent, signal } = scope
  const db = ctx.store.db
  const credentialId = agent.model_credential_id
  const connection = credentialId ? await scope.models.open(turn.org_id, credentialId, agent.model) : null
  if (!connection) {
    throw new TurnFailure({
      code: 'provider_error',
      message: 'This session has no model connection: the one it ran on was deleted and the organization had no other. Connect a model (POST /v1/model-credentials) and send the message again.',
    })
  }
  const { credential, key, model } = connection

  const steers = await undeliveredSteers(db, turn.id)
  if (steers.length) {
    await turnWrite(ctx, async (trx) => {
      await appendConversation(trx, turn.session_id, turn.id, steers.map((s) => ({ role: 'user' as const, content: s.text })), Date.now())
      await markSteersDelivered(trx, steers.map((s) => s.id))
    })
  }

  const { inPlay, unavailable } = await toolsInPlay(ctx, turn, agent.tools)
  await reportUnavailable(ctx, turn, unavailable)
  const tools = offeredTools(inPlay)
  const instructions = agentInstructions(WORKSPACE_MOUNT, agent.instructions ?? '')
  const window = contextWindow(agent.model, ctx.config.contextWindowTokens)
  const overhead = estimateTokens(instructions) + estimateTokens(Object.entries(tools).map(([n, t]) => [n, t.description, t.inputSchema]))

  /** The conversation to send, compacted first when it nears the window (or when `force`d). */
  const compact = async (budget: number, force: boolean): Promise<ModelMessage[]> => {
    const convo = await scope.conversation.read()
    const total = convo.reduce((n, e) => n + e.tokens, 0)
    const asIs = () => convo.map((e) => e.message)
    if (!force && total + overhead <= window * 0.8) return asIs()
    const plan = planCompaction(convo, budget - overhead)
    if (!plan && total + overhead <= window && !force) return asIs()
    if (!plan || plan.after + overhead > window) {
      throw new TurnFailure({ code: 'context_length_exceeded', message: `The conversation (about ${total + overhead} tokens) does not fit the context window of ${agent.model} (${window} tokens), even compacted.` })
    }
    await turnWrite(ctx, async (trx, record) => {
      await compactConversation(trx, turn.session_id, plan.upTo, plan.summary, Date.now())
      await record({ ...turnEventScope(turn), type: 'agent.compaction', payload: { before: plan.before + overhead, after: plan.after + overhead } })
    })
    scope.conversation.compacted(plan.upTo, plan.summary)
    return (await scope.conversation.read()).map((e) => e.message)
  }

  let messages = await compact(Math.floor(window * 0.5), false)
  // Live only, never stored, so nothing fences them in a transaction: a delta goes out only while
  // the node is sure of its leases (one woken past them streams nothing of an answer it holds).
  const transient = (type: LiveEventName) => (delta: string) => {
    if (ctx.leaseHeld && ctx.leaseHeld() !== true) return
    ctx.bus.publish({ ...turnEventScope(turn), type, createdAt: Date.now(), payload: { delta } })
  }
  const delays = ctx.config.providerRetryDelaysMs
  let compactedForProvider = false
  for (let attempt = 0; ; attempt++) {
    // A retry may come long after the driver last looked (a node paused past its lease wakes with
    // its retry due): it asks again only while the session is still this driver's.
    if (attempt > 0 && ctx.fence) await checkFence(db, ctx.store.dialect, ctx.fence, false)
    const timer = ctx.metrics.modelStepSeconds.startTimer({ provider: credential.provider })
    try {
      const raw = await runModelStep({ model, instructions, messages, tools, maxOutputTokens: maxOutputTokens(credential.provider, agent.model), signal, stallMs: ctx.config.modelStallMs, onText: transient('agent.text'), onThinking: transient('agent.thinking') })
      timer({ result: 'ok' })
      const step = withFreshCallIds(raw, await takenCallIds(db, turn.session_id, raw.toolCalls.map((c) => c.toolCallId)))
      scope.early.open(turn.session_id, step.toolCalls)
      await recordStep(ctx, turn, step, { model: agent.model, credentialId: credential.id, isSandboxTool: (n) => ['builtin', 'network', 'mcp'].includes(toolKind(n, inPlay)) })
      return step
    } catch (caught) {
      if (!(caught instanceof ProviderFailure)) throw caught
      if (!signal.aborted) timer({ result: 'error' })
      // A provider may quote the key it refused; the message goes into events other tokens read.
      const err = new ProviderFailure(caught.kind, caught.message.split(key).join('[key withheld]'), { cause: caught })
      if (err.kind === 'unauthorized') throw new TurnFailure({ code: 'provider_unauthorized', message: err.message })
      if (err.kind === 'context') {
        // The provider counts better than the estimate: compact harder, once.
        if (compactedForProvider) throw new TurnFailure({ code: 'context_length_exceeded', message: err.message })
        compactedForProvider = true
        messages = await compact(Math.floor(window * 0.3), true)
        continue
      }
      if (err.kind === 'fatal' || attempt >= delays.length) {
        const tries = attempt + 1
        throw new TurnFailure({ code: 'provider_error', message: `${err.message}${err.kind === 'retryable' ? ` (gave up after ${tries} attempt${tries === 1 ? '' : 's'})` : ''}` })
      }
      await sleep(delays[attempt]!, undefined, { signal })
    }
  }
}

/**
 * MCP servers that would not connect: each reported once a turn (`mcp.unavailable`) and skipped;
 * a required one fails the turn, naming it.
 */
async function reportUnavailable(ctx: Ctx, turn: TurnScope['turn'], unavailable: McpUnavailable[]): Promise<void> {
  const required = unavailable.find((u) => u.required)
  if (required) throw new TurnFailure({ code: 'sandbox_error', message: `The required MCP server "${required.server}" would not connect: ${required.reason}` })
  const fresh = unavailable.filter((u) => u.fresh)
  if (fresh.length > 0) {
    await turnWrite(ctx, async (trx, record) => {
      for (const u of fresh) await record({ ...turnEventScope(turn), type: 'mcp.unavailable', payload: { server: u.server, reason: u.reason } })
    })
  }
}
