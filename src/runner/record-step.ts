import type { ModelMessage } from 'ai'
import type { Deps } from '../deps.ts'
import type { AnyEvent } from '../events/events.schema.ts'
import { turnWrite } from './turn-write.ts'
import type { FileChange } from '../tools/builtin/builtin-tool.ts'
import { appendConversation } from '../turns/conversation.store.ts'
import { countStep, endRunningCall, insertModelStep, turnEventScope, type TurnRow } from '../turns/turns.store.ts'
import type { StepResult, ToolCallRequest } from './model-step.ts'
import type { ResultPart } from '../tools/result-parts.ts'

type Ctx = Pick<Deps, 'store' | 'bus'>

/**
 * Persists a model step before anything acts on it: the assistant message for the next step,
 * `agent.message` for its text, `agent.tool_call` for each sandbox tool it calls, and the tokens
 * it used.
 */
export async function recordStep(
  ctx: Ctx,
  turn: TurnRow,
  step: StepResult,
  meta: { model: string; credentialId: string; isSandboxTool: (name: string) => boolean },
): Promise<void> {
  const now = Date.now()
  await turnWrite(ctx, async (trx, record) => {
    // A turn settled meanwhile (its session deleted, say) never changes: nothing is written.
    const n = await countStep(trx, turn.id)
    if (n === null) return
    await appendConversation(trx, turn.session_id, turn.id, step.messages, now)
    await insertModelStep(trx, { turnId: turn.id, step: n, sessionId: turn.session_id, orgId: turn.org_id, model: meta.model, credentialId: meta.credentialId, inputTokens: step.usage.input, outputTokens: step.usage.output, now })
    if (step.text.trim()) await record({ ...turnEventScope(turn), type: 'agent.message', payload: { text: step.text } })
    for (const c of step.toolCalls) {
      if (meta.isSandboxTool(c.toolName)) await record({ ...turnEventScope(turn), type: 'agent.tool_call', payload: { toolCallId: c.toolCallId, toolName: c.toolName, args: c.input } })
    }
  })
}

export type CallResult = {
  /** What the model receives (unless `content` is given). */
  output: string
  /** A result with images: its parts in order, sent to the model instead of `output`. */
  content?: ResultPart[]
  isError: boolean
  /** Set for sandbox tools: `agent.tool_result` is recorded with this summary. */
  summary?: string
  cancelled?: boolean
  changes?: FileChange[]
  /** More events recorded in the same transaction (agent.todos, approval.resolved …). */
  events?: AnyEvent[]
}

/** A tool call's result, as the model will see it, with its events, in one transaction. */
export async function recordCallResult(ctx: Ctx, turn: TurnRow, call: ToolCallRequest, r: CallResult): Promise<void> {
  const message: ModelMessage = {
    role: 'tool',
    content: [{ type: 'tool-result', toolCallId: call.toolCallId, toolName: call.toolName, output: r.isError ? { type: 'error-text', value: r.output } : r.content ? { type: 'content', value: r.content } : { type: 'text', value: r.output } }],
  }
  await turnWrite(ctx, async (trx, record) => {
    // The turn may have been settled meanwhile (its session deleted): a settled turn never changes.
    if (!(await endRunningCall(trx, turn.id))) return
    for (const e of r.events ?? []) await record({ ...turnEventScope(turn), type: e.type, payload: e.payload })
    await appendConversation(trx, turn.session_id, turn.id, [message], Date.now())
    if (r.summary !== undefined) {
      await record({
        ...turnEventScope(turn),
        type: 'agent.tool_result',
        payload: { toolCallId: call.toolCallId, toolName: call.toolName, isError: r.isError, cancelled: r.cancelled ?? false, summary: r.summary },
      })
    }
    // A command may change thousands of files: recorded a few statements for all, not one each.
    await record.all((r.changes ?? []).map((ch) => ({ ...turnEventScope(turn), type: 'file.changed' as const, payload: { path: ch.path, kind: ch.kind, ...(ch.diff !== undefined ? { diff: ch.diff } : {}) } })))
  })
}
