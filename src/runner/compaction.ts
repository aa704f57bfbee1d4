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

const HEAD = "[The earlier part of this conversation was compacted to fit the model's context window. What happened, in order:]"
const TAIL = '[End of the compacted part; the conversation continues below.]'

/**
 * Plans the compaction of a conversation towards `budget` tokens: the oldest messages are replaced
 * by one message that recounts them briefly (what was asked, which tools ran, what they
 * answered), and the newest are kept whole. The cut never falls between a tool call and its
 * result. When no cut reaches the budget, the one that saves most is planned; null when no cut
 * saves anything.
 */
export function planCompaction(convo: ConversationEntry[], budget: number): CompactionPlan | null {
  const before = convo.reduce((n, e) => n + e.tokens, 0)
  const lines = convo.map((e) => describe(e.message))
  let kept = before
  let summaryChars = HEAD.length + TAIL.length + 40
  let best: { i: number; after: number } | null = null
  for (let i = 1; i < convo.length; i++) {
    kept -= convo[i - 1]!.tokens
    summaryChars += (lines[i - 1]?.length ?? 0) + 1
    if (convo[i]!.message.role === 'tool') continue
    const after = kept + Math.ceil(summaryChars / 4)
    if (!best || after < best.after) best = { i, after }
    if (after <= budget) break
  }
  if (!best) return null
  const text = lines.slice(0, best.i).filter((l): l is string => l !== null)
  const summary: ModelMessage = { role: 'user', content: `${HEAD}\n${text.join('\n')}\n${TAIL}` }
  const after = convo.slice(best.i).reduce((n, e) => n + e.tokens, 0) + estimateTokens(summary)
  return after < before ? { upTo: convo[best.i - 1]!.ordinal, summary, before, after } : null
}
