import type { Deps } from '../deps.ts'
import { turnWrite } from './turn-write.ts'
import type { PermissionRule } from '../sessions/sessions.schema.ts'
import { builtinTool, ruleSubject } from '../tools/builtin/index.ts'
import { WORKSPACE_MOUNT } from '../workspaces/workspace-manager.ts'
import { callsOfTurn, insertPendingCall, type PendingCall } from '../turns/pending-calls.store.ts'
import { setRunningCall, turnEventScope, type TurnRow } from '../turns/turns.store.ts'
import { toolKind, toolsInPlay, type ToolKind } from './agent-tools.ts'
import type { McpHub } from '../mcp/mcp-hub.ts'
import type { BrowserHub } from '../tools/browser/browser-hub.ts'
import type { McpTool } from '../mcp/mcp-tools.ts'
import { networkRuleSubject, type NetworkTool } from '../tools/network/index.ts'
import type { ToolCallRequest } from './model-step.ts'
import { decide, type ApprovalMode } from './permissions.ts'
import { recordCallResult, type CallResult } from './record-step.ts'
import { moveSession } from '../sessions/session-status.ts'
import type { StoredAgent } from '../sessions/sessions.store.ts'
import type { ConversationView } from './conversation-view.ts'
import type { ModelConnections } from './model-connections.ts'
import type { EarlyWindow } from './early-window.ts'

type Ctx = Pick<Deps, 'store' | 'bus' | 'config' | 'workspaces' | 'metrics'> & { mcp: McpHub; browser: BrowserHub }

export type TurnScope = {
  turn: TurnRow
  agent: StoredAgent
  signal: AbortSignal
  /** Text of files the turn has read or written, so that later changes carry diffs. */
  seen: Map<string, string>
  /** The session's conversation, read through its driver (only what is new each time). */
  conversation: ConversationView
  /** The model connections the driver opened (their keys opened once). */
  models: ModelConnections
  /** The change window of the step's first bash call, opened while the step was persisted. */
  early: EarlyWindow
}

const asObject = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {})

/**
 * Works through the tool calls of the turn's last model step that have no result yet, in order.
 * Each result is persisted before the next call starts. A call that must wait (an approval, a
 * question, the caller's function) parks the turn: its row is the whole state, and answering it
 * wakes the runner again.
 */
export async function handleOpenCalls(ctx: Ctx, scope: TurnScope, open: ToolCallRequest[]): Promise<'parked' | 'continue'> {
  try {
    return await workThrough(ctx, scope, open)
  } finally {
    // Its call refused, parked or cut short: the window opened for it is closed.
    scope.early.drop()
  }
}

async function workThrough(ctx: Ctx, scope: TurnScope, open: ToolCallRequest[]): Promise<'parked' | 'continue'> {
  const { turn, agent } = scope
  const { inPlay } = await toolsInPlay(ctx, turn, agent.tools)
  const rows = new Map((await callsOfTurn(ctx.store.db, turn.id)).map((c) => [c.callId, c]))
  for (const call of open) {
    const kind = toolKind(call.toolName, inPlay)
    const row = rows.get(call.toolCallId)
    if (kind === 'function') {
      if (!row) {
        await requireFunctions(ctx, turn, open.filter((c) => toolKind(c.toolName, inPlay) === 'function' && !rows.has(c.toolCallId)))
        return 'parked'
      }
      if (row.status === 'pending') return 'parked'
      await recordCallResult(ctx, turn, call, functionResult(row))
      continue
    }
    if (kind === 'question') {
      if (!row) {
        const r = await askQuestion(ctx, turn, call)
        if (r === 'parked') return 'parked'
        continue
      }
      if (row.status === 'pending') return 'parked'
      await recordCallResult(ctx, turn, call, { output: String(asObject(row.answer).answer ?? ''), isError: false })
      continue
    }
    if (kind === 'unknown') {
      await recordCallResult(ctx, turn, call, { output: `There is no tool named "${call.toolName}". Call one of the tools you were offered.`, isError: true })
      continue
    }
    const mcpTool = kind === 'mcp' ? inPlay.mcp.find((t) => t.name === call.toolName)! : null
    const verdict = await permit(ctx, scope, call, kind, row, mcpTool)
    if (verdict === 'parked') return 'parked'
    if (verdict !== 'allow') {
      await recordCallResult(ctx, turn, call, { ...verdict, summary: kind === 'builtin' || kind === 'mcp' || kind === 'network' ? 'refused' : undefined })
      continue
    }
    // Built-in and network tools by name (a fixed set); MCP tools are the servers' own, unbounded.
    const timer = ctx.metrics.toolCallSeconds.startTimer({ tool: mcpTool ? 'mcp' : call.toolName })
    if (mcpTool) await runMcpCall(ctx, scope, call, mcpTool)
    else if (kind === 'network') await runNetworkCall(ctx, scope, call, inPlay.network.find((t) => t.type === call.toolName)!)
    else await runCall(ctx, scope, call, kind)
    timer()
  }
  return 'continue'
}

function functionResult(row: PendingCall): CallResult {
  const a = asObject(row.answer)
  if (typeof a.error === 'string') return { output: `The function failed: ${a.error}`, isError: true }
  const out = a.output
  return { output: typeof out === 'string' ? out : JSON.stringify(out ?? null), isError: false }
}

/** Registers every function call of the step at once, so that a caller reads them all together. */
async function requireFunctions(ctx: Ctx, turn: TurnRow, calls: ToolCallRequest[]): Promise<void> {
  const now = Date.now()
  await turnWrite(ctx, async (trx, record) => {
    for (const c of calls) {
      await insertPendingCall(trx, {
        ...turnEventScope(turn),
        callId: c.toolCallId,
        kind: 'function',
        name: c.toolName,
        args: c.input,
        createdAt: now,
        // Not a deadline (an answer is never refused for lateness): the latest moment the
        // workspace's current run can last; processes the turn started may be gone after it.
        expiresAt: now + ctx.config.workspaceLifetimeMs,
      })
      await record({ ...turnEventScope(turn), type: 'tool.required', payload: { toolCallId: c.toolCallId, name: c.toolName, arguments: c.input } })
    }
    const first = calls[0]!
    await moveSession(trx, record, { id: turn.session_id, orgId: turn.org_id }, 'requires_action', {
      turn_id: turn.id,
      required_action: { type: 'function_call', call_id: first.toolCallId, name: first.toolName },
    })
  })
}

async function askQuestion(ctx: Ctx, turn: TurnRow, call: ToolCallRequest): Promise<'parked' | 'answered'> {
  const args = asObject(call.input)
  const question = args.question
  if (typeof question !== 'string' || !question.trim()) {
    await recordCallResult(ctx, turn, call, { output: 'ask_question needs a "question" string.', isError: true })
    return 'answered'
  }
  const options = Array.isArray(args.options) ? args.options.filter((o): o is string => typeof o === 'string') : undefined
  await turnWrite(ctx, async (trx, record) => {
    await insertPendingCall(trx, { ...turnEventScope(turn), callId: call.toolCallId, kind: 'question', name: call.toolName, args: call.input, createdAt: Date.now(), expiresAt: null })
    await record({
      ...turnEventScope(turn),
      type: 'question.asked',
      payload: {
        toolCallId: call.toolCallId,
        question,
        ...(options ? { options } : {}),
        ...(typeof args.allow_freeform === 'boolean' ? { allowFreeform: args.allow_freeform } : {}),
      },
    })
  })
  return 'parked'
}

type Verdict = 'allow' | 'parked' | CallResult

/** Rules and approval mode, then the person's answer when one was asked for. */
async function permit(ctx: Ctx, scope: TurnScope, call: ToolCallRequest, kind: ToolKind, row: PendingCall | undefined, mcpTool: McpTool | null): Promise<Verdict> {
  const { turn, agent } = scope
  // An MCP tool counts as writing unless its server declares it read-only (readOnlyHint).
  // browser_act can submit a form or press a button that changes something elsewhere: it writes.
  const writes = kind === 'builtin' ? builtinTool(call.toolName)!.kind === 'writes' : mcpTool ? !mcpTool.readOnly : kind === 'network' && call.toolName === 'browser_act'
  if (row) {
    if (row.status === 'pending') return 'parked'
    const a = asObject(row.answer)
    if (a.approved === true) return 'allow'
    const reason = typeof a.reason === 'string' && a.reason ? a.reason : a.code === 'approval_timeout' ? 'Nobody answered the approval request in time.' : 'The person refused this call.'
    return { output: `Not run: ${reason}`, isError: true }
  }
  const subject = {
    tool: call.toolName,
    writes,
    ...(kind === 'builtin' ? ruleSubject(call.toolName, asObject(call.input)) : kind === 'network' ? networkRuleSubject(call.toolName, asObject(call.input)) : {}),
  }
  const d = decide(subject, (agent.approval_mode ?? 'auto') as ApprovalMode, (agent.permission_rules ?? []) as PermissionRule[])
  if (d.decision === 'allow') return 'allow'
  if (d.decision === 'deny') {
    return {
      output: `Not run: ${d.reason}`,
      isError: true,
      events: [{ type: 'approval.resolved', payload: { toolCallId: call.toolCallId, approved: false, name: call.toolName, code: d.code, reason: d.reason } }],
    }
  }
  await turnWrite(ctx, async (trx, record) => {
    const now = Date.now()
    await insertPendingCall(trx, { ...turnEventScope(turn), callId: call.toolCallId, kind: 'approval', name: call.toolName, args: call.input, createdAt: now, expiresAt: now + ctx.config.approvalTimeoutMs })
    await record({ ...turnEventScope(turn), type: 'approval.requested', payload: { toolCallId: call.toolCallId, name: call.toolName, args: call.input, sensitive: writes } })
  })
  return 'parked'
}

/** Runs a built-in tool in the workspace, or updates the task list. */
async function runCall(ctx: Ctx, scope: TurnScope, call: ToolCallRequest, kind: ToolKind): Promise<void> {
  const { turn } = scope
  const args = asObject(call.input)
  if (kind === 'todo') {
    const items = Array.isArray(args.items) ? args.items.map(asObject).filter((i) => typeof i.label === 'string' && typeof i.status === 'string') : null
    if (!items) return recordCallResult(ctx, turn, call, { output: 'todo_write needs "items": [{label, status}].', isError: true })
    const list = items.map((i) => ({ label: i.label as string, status: i.status as string }))
    return recordCallResult(ctx, turn, call, { output: `Task list updated (${list.length} items).`, isError: false, events: [{ type: 'agent.todos', payload: { items: list } }] })
  }
  const tool = builtinTool(call.toolName)!
  if (turn.running_call === call.toolCallId) {
    // The workspace comes back first: on a node that took the session over that is a restore from
    // the last snapshot, whose note then reaches the model in the same step as this cut call's
    // result, rather than a step later, after it acted on files it believed were there. Should it
    // not come back, the result is still recorded; the model's next call meets the failure.
    await ctx.workspaces.acquire(turn.session_id).catch(() => {})
    return restartedDuring(ctx, turn, call, 'Check the workspace before running it again.')
  }
  const sandbox = await ctx.workspaces.acquire(turn.session_id)
  await turnWrite(ctx, (trx) => setRunningCall(trx, turn.id, call.toolCallId))
  const window = await scope.early.take(call.toolCallId, sandbox)
  const outcome = await tool.run(args, { sandbox, mount: WORKSPACE_MOUNT, signal: scope.signal, seen: scope.seen, window })
  await recordCallResult(ctx, turn, call, { output: outcome.output, isError: outcome.isError, summary: outcome.summary, cancelled: outcome.cancelled, changes: outcome.changes })
  if (scope.signal.aborted) throw scope.signal.reason
}

/**
 * The service stopped while this call ran: its outcome is unknown, and running it again could
 * repeat a change, so the model is told and decides.
 */
function restartedDuring(ctx: Ctx, turn: TurnRow, call: ToolCallRequest, advice: string): Promise<void> {
  return recordCallResult(ctx, turn, call, {
    output: `The service stopped while this tool was running (a restart, or its node stopped and another took the session over); whether it finished is unknown. ${advice}`,
    isError: true,
    summary: 'interrupted by a service restart',
  })
}

/** Calls an MCP server's tool, within the entry's timeout; what it answers reaches the model as is. */
async function runMcpCall(ctx: Ctx, scope: TurnScope, call: ToolCallRequest, tool: McpTool): Promise<void> {
  const { turn } = scope
  if (turn.running_call === call.toolCallId) return restartedDuring(ctx, turn, call, 'Check before calling it again.')
  await turnWrite(ctx, (trx) => setRunningCall(trx, turn.id, call.toolCallId))
  const out = await ctx.mcp.call(turn.session_id, tool, asObject(call.input), scope.signal)
  const summary = out.isError ? `${tool.server} answered with an error` : `${tool.server}: ${out.text.length} characters${out.parts ? ', with images' : ''}`
  await recordCallResult(ctx, turn, call, { output: out.text, isError: out.isError, summary, ...(out.parts && !out.isError ? { content: out.parts } : {}) })
}

/** A network tool: it acts under the workspace's network policy (see each tool). */
async function runNetworkCall(ctx: Ctx, scope: TurnScope, call: ToolCallRequest, tool: NetworkTool): Promise<void> {
  const { turn } = scope
  const sandbox = () => ctx.workspaces.acquire(turn.session_id)
  let out: Awaited<ReturnType<NetworkTool['run']>>
  try {
    out = await tool.run(asObject(call.input), { config: ctx.config, sandbox, page: () => ctx.browser.page(turn.session_id, sandbox), signal: scope.signal })
  } catch (err) {
    if (scope.signal.aborted) throw scope.signal.reason
    // A tool that broke (a browser that would not start, a page that timed out) is the model's to know, not the turn's end.
    out = { output: `${call.toolName} failed: ${(err as Error).message.split('\n')[0]}`, isError: true, summary: 'failed' }
  }
  await recordCallResult(ctx, turn, call, { output: out.output, isError: out.isError, summary: out.summary, ...(out.content && !out.isError ? { content: out.content } : {}) })
  if (scope.signal.aborted) throw scope.signal.reason
}
