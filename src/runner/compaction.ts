import type { ModelMessage } from 'ai'
import { estimateTokens, type ConversationEntry } from '../turns/conversation.store.ts'

export type CompactionPlan = { upTo: number; summary: ModelMessage; before: number; after: number }

const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n)}…` : s)

function describe(m: ModelMessage): string | null {
  if (m.role === 'user') return `Person: ${clip(typeof m.content === 'string' ? m.content : m.content.map((p) => (p.type === 'text' ? p.text : '')).join(' '), 2000)}`
  if (m.role === 'assistant') {
    if (typeof m.content === 'string') return `You: ${clip(m.content, 500)}`
    const parts = m.content.flatMap((p) =>
      p.type === 'text' && p.text.trim() ? [`You: ${clip(p.text, 500)}`] : p.type === 'tool-call' ? [`You called ${p.toolName} ${clip(JSON.stringify(p.input), 200)}`] : [],
    )
    return parts.length ? parts.join('\n') : null
  }
  if (m.role === 'tool') {
    const parts = m.content.flatMap((p) => {
      if (p.type !== 'tool-result') return []
      const o = p.output
      const text = o.type === 'text' || o.type === 'error-text' ? o.value : JSON.stringify('value' in o ? o.value : o)
      return [`${p.toolName} ${o.type === 'error-text' ? 'failed' : 'answered'}: ${clip(text, 200)}`]
    })
    return parts.length ? parts.join('\n') : null
  }
  return null
}

/**
 * Plans the compaction of a conversation down to `budget` tokens: the oldest messages are replaced
 * by one message that recounts them briefly (what was asked, which tools ran, what they
 * answered), and the newest are kept whole. The cut never falls between a tool call and its
 * result. Null when nothing can be cut.
 */
export function planCompaction(convo: ConversationEntry[], budget: number): CompactionPlan | null {
  const before = convo.reduce((n, e) => n + e.tokens, 0)
  let kept = before
  for (let i = 1; i < convo.length; i++) {
    kept -= convo[i - 1]!.tokens
    if (convo[i]!.message.role === 'tool') continue
    const lines = convo.slice(0, i).map((e) => describe(e.message)).filter((l): l is string => l !== null)
    const summary: ModelMessage = {
      role: 'user',
      content: `[The earlier part of this conversation was compacted to fit the model's context window. What happened, in order:]\n${lines.join('\n')}\n[End of the compacted part; the conversation continues below.]`,
    }
    const after = kept + estimateTokens(summary)
    if (after <= budget || i === convo.length - 1) {
      if (after >= before) return null
      return { upTo: convo[i - 1]!.ordinal, summary, before, after }
    }
  }
  return null
}
