import type { Db } from '../db/database.ts'
import { randomText } from '../shared/ids.ts'
import { fromJson } from '../shared/json.ts'
import type { StepResult } from './model-step.ts'

/** Every tool-call id the session's model has used: answers and approvals are keyed by them. */
export async function usedCallIds(db: Db, sessionId: string): Promise<Set<string>> {
  const used = new Set<string>()
  const pending = await db.selectFrom('pending_calls').select('call_id').where('session_id', '=', sessionId).execute()
  for (const p of pending) used.add(p.call_id)
  const rows = await db.selectFrom('conversation').select('message').where('session_id', '=', sessionId).where('role', '=', 'assistant').execute()
  for (const r of rows) {
    const m = fromJson<{ content?: unknown }>(r.message, {})
    if (Array.isArray(m.content)) for (const p of m.content as { type?: string; toolCallId?: string }[]) if (p.type === 'tool-call' && p.toolCallId) used.add(p.toolCallId)
  }
  return used
}

/**
 * Some OpenAI-compatible servers number their tool calls `call_0`, `call_1` … on every step. An id
 * used before in the session would find the earlier call's approval or answer, so a repeated one
 * is replaced, in the message sent back to the model too (providers accept whatever id they are
 * given back). Ids the provider made unique pass unchanged.
 */
export function withFreshCallIds(step: StepResult, used: Set<string>): StepResult {
  const renamed = new Map<string, string>()
  for (const c of step.toolCalls) {
    if (!used.has(c.toolCallId) && !renamed.has(c.toolCallId)) {
      used.add(c.toolCallId)
      continue
    }
    renamed.set(c.toolCallId, `call_${randomText(20)}`)
  }
  if (renamed.size === 0) return step
  const rename = (id: string) => renamed.get(id) ?? id
  return {
    ...step,
    toolCalls: step.toolCalls.map((c) => ({ ...c, toolCallId: rename(c.toolCallId) })),
    messages: step.messages.map((m) =>
      m.role === 'assistant' && Array.isArray(m.content) ? { ...m, content: m.content.map((p) => (p.type === 'tool-call' ? { ...p, toolCallId: rename(p.toolCallId) } : p)) } : m,
    ),
  }
}
