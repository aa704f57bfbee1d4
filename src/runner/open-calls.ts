import type { ConversationEntry } from '../turns/conversation.store.ts'
import type { ToolCallRequest } from './model-step.ts'

/**
 * The tool calls of the turn's last model step that have no result in the conversation yet:
 * what the runner still owes the model before it may ask it anything again.
 */
export function openToolCalls(convo: ConversationEntry[], turnId: string): ToolCallRequest[] {
  let at = -1
  for (let i = convo.length - 1; i >= 0; i--) {
    const e = convo[i]!
    if (e.turnId !== turnId) break
    if (e.message.role === 'assistant') {
      at = i
      break
    }
  }
  if (at < 0) return []
  const m = convo[at]!.message
  if (m.role !== 'assistant' || typeof m.content === 'string') return []
  const answered = new Set<string>()
  for (const e of convo.slice(at + 1)) {
    if (e.message.role !== 'tool') continue
    for (const p of e.message.content) if (p.type === 'tool-result') answered.add(p.toolCallId)
  }
  return m.content.flatMap((p) => (p.type === 'tool-call' && !answered.has(p.toolCallId) ? [{ toolCallId: p.toolCallId, toolName: p.toolName, input: p.input }] : []))
}
