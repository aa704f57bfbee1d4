import type { Db } from '../db/database.ts'
import { prepared } from '../db/prepared.ts'
import { randomText } from '../shared/ids.ts'
import type { StepResult } from './model-step.ts'

/**
 * Which of these tool-call ids the session already holds a row for (an approval, a question, a
 * caller's function): those rows are keyed by the id, so a repeated id would find the earlier
 * call's answer. Elsewhere a repeat is harmless: a step's results are matched only after its own
 * assistant message.
 */
export async function takenCallIds(db: Db, sessionId: string, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set()
  // Nearly every step asks for one call: that statement is prepared, a list is built each time.
  const rows = ids.length === 1 ? await oneTaken(db, sessionId, ids[0]!) : await db.selectFrom('pending_calls').select('call_id').where('session_id', '=', sessionId).where('call_id', 'in', ids).execute()
  return new Set(rows.map((r) => r.call_id))
}
const oneTaken = prepared((db, sessionId: string, id: string) => db.selectFrom('pending_calls').select('call_id').where('session_id', '=', sessionId).where('call_id', '=', id))

/**
 * Some OpenAI-compatible servers number their tool calls `call_0`, `call_1` … on every step. A
 * call whose id is taken, or repeats an earlier call of the same step, gets a fresh one, in the
 * message sent back to the model too (providers accept whatever id they are given back). Ids the
 * provider made unique pass unchanged.
 */
export function withFreshCallIds(step: StepResult, taken: Set<string>): StepResult {
  const used = new Set(taken)
  // The final id of each occurrence, in order: the message's tool-call parts come in the same order.
  const finalIds = new Map<string, string[]>()
  let renamed = false
  for (const c of step.toolCalls) {
    let id = c.toolCallId
    if (used.has(id)) {
      id = `call_${randomText(20)}`
      renamed = true
    }
    used.add(id)
    finalIds.set(c.toolCallId, [...(finalIds.get(c.toolCallId) ?? []), id])
  }
  if (!renamed) return step
  const next = (original: string, seen: Map<string, number>) => {
    const n = seen.get(original) ?? 0
    seen.set(original, n + 1)
    return finalIds.get(original)?.[n] ?? original
  }
  const inCalls = new Map<string, number>()
  const inMessages = new Map<string, number>()
  return {
    ...step,
    toolCalls: step.toolCalls.map((c) => ({ ...c, toolCallId: next(c.toolCallId, inCalls) })),
    messages: step.messages.map((m) =>
      m.role === 'assistant' && Array.isArray(m.content)
        ? { ...m, content: m.content.map((p) => (p.type === 'tool-call' ? { ...p, toolCallId: next(p.toolCallId, inMessages) } : p)) }
        : m,
    ),
  }
}
