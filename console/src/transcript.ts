// A session's transcript, folded from its events (the persisted ones replayed from the start, then
// the live ones): streamed text grows in one entry that the settled message then fills in place, so
// nothing moves when a step ends; a tool call and its result are one entry; what waits on a person
// (an approval, a question, a caller function) is an entry that knows whether it was answered.
import type { WarrenEvent } from '../../sdk/src/vocabulary.ts'

export type Entry =
  | { kind: 'user'; key: string; text: string }
  | { kind: 'text'; key: string; text: string; streaming: boolean }
  | { kind: 'tool'; key: string; id: string; name: string; args: unknown; result?: { isError: boolean; cancelled: boolean; summary: string } }
  | { kind: 'file'; key: string; path: string; change: string; diff?: string }
  | { kind: 'approval'; key: string; id: string; name: string; args: unknown; resolved?: { approved: boolean; code?: string } }
  | { kind: 'question'; key: string; id: string; question: string; options?: string[]; freeform: boolean; answer?: string; closed?: boolean }
  | { kind: 'function'; key: string; id: string; name: string; args: unknown; resolved?: { success: boolean; closed?: boolean } }
  | { kind: 'notice'; key: string; text: string; tone: 'error' | 'info' }

export type Transcript = { entries: Entry[]; todos: { label: string; status: string }[]; n: number }

export const EMPTY: Transcript = { entries: [], todos: [], n: 0 }

/** The transcript after one more event; the same object when the event changes nothing shown. */
export function fold(t: Transcript, e: WarrenEvent): Transcript {
  const key = `e${t.n}`
  const n = t.n + 1
  const push = (entry: Entry): Transcript => ({ ...t, n, entries: [...t.entries, entry] })
  const update = <K extends Entry['kind']>(kind: K, match: (x: Extract<Entry, { kind: K }>) => boolean, change: (x: Extract<Entry, { kind: K }>) => Entry): Transcript | null => {
    for (let i = t.entries.length - 1; i >= 0; i--) {
      const x = t.entries[i]!
      if (x.kind === kind && match(x as Extract<Entry, { kind: K }>)) {
        const entries = t.entries.slice()
        entries[i] = change(x as Extract<Entry, { kind: K }>)
        return { ...t, n, entries }
      }
    }
    return null
  }
  switch (e.type) {
    case 'user.message':
      return push({ kind: 'user', key, text: e.payload.text })
    case 'agent.text': {
      const last = t.entries.at(-1)
      if (last?.kind === 'text' && last.streaming) return update('text', (x) => x === last, (x) => ({ ...x, text: x.text + e.payload.delta }))!
      return push({ kind: 'text', key, text: e.payload.delta, streaming: true })
    }
    case 'agent.message':
      if (!e.payload.text) return t
      return update('text', (x) => x.streaming, (x) => ({ ...x, text: e.payload.text, streaming: false })) ?? push({ kind: 'text', key, text: e.payload.text, streaming: false })
    case 'agent.tool_call':
      return push({ kind: 'tool', key, id: e.payload.toolCallId, name: e.payload.toolName, args: e.payload.args })
    case 'agent.tool_result': {
      const result = { isError: e.payload.isError, cancelled: e.payload.cancelled, summary: e.payload.summary }
      return update('tool', (x) => x.id === e.payload.toolCallId, (x) => ({ ...x, result })) ?? push({ kind: 'tool', key, id: e.payload.toolCallId, name: e.payload.toolName, args: undefined, result })
    }
    case 'file.changed':
      return push({ kind: 'file', key, path: e.payload.path, change: e.payload.kind, diff: e.payload.diff })
    case 'agent.todos':
      return { ...t, n, todos: e.payload.items }
    case 'approval.requested':
      return push({ kind: 'approval', key, id: e.payload.toolCallId, name: e.payload.name, args: e.payload.args })
    case 'approval.resolved':
      return update('approval', (x) => x.id === e.payload.toolCallId, (x) => ({ ...x, resolved: { approved: e.payload.approved, code: e.payload.code } })) ?? t
    case 'question.asked':
      return push({ kind: 'question', key, id: e.payload.toolCallId, question: e.payload.question, options: e.payload.options, freeform: e.payload.allowFreeform ?? true })
    case 'question.answered':
      return update('question', (x) => x.id === e.payload.toolCallId, (x) => ({ ...x, answer: e.payload.answer, closed: e.payload.cancelled === true })) ?? t
    case 'tool.required':
      return push({ kind: 'function', key, id: e.payload.toolCallId, name: e.payload.name, args: e.payload.arguments })
    case 'tool.resolved':
      return update('function', (x) => x.id === e.payload.toolCallId, (x) => ({ ...x, resolved: { success: e.payload.success, closed: e.payload.cancelled === true } })) ?? t
    case 'turn.ended': {
      // A turn cut short leaves its streamed words as they were, no longer streaming, and nothing
      // of it waits any more: the service closes its open calls as the turn ends (a log written
      // before it did has turn.ended alone), and a call without a result never gets one.
      const ended = (x: Entry): Entry | null =>
        x.kind === 'text' && x.streaming ? { ...x, streaming: false }
        : x.kind === 'approval' && !x.resolved ? { ...x, resolved: { approved: false, code: 'turn_ended' } }
        : x.kind === 'question' && x.answer === undefined ? { ...x, answer: '', closed: true }
        : x.kind === 'function' && !x.resolved ? { ...x, resolved: { success: false, closed: true } }
        : x.kind === 'tool' && !x.result ? { ...x, result: { isError: true, cancelled: true, summary: 'not run: the turn ended' } }
        : null
      return t.entries.some((x) => ended(x) !== null) ? { ...t, n, entries: t.entries.map((x) => ended(x) ?? x) } : t
    }
    case 'agent.error':
      return push({ kind: 'notice', key, text: e.payload.message, tone: 'error' })
    case 'workspace.recovery_failed':
      return push({ kind: 'notice', key, text: e.payload.message, tone: 'error' })
    case 'mcp.unavailable':
      return push({ kind: 'notice', key, text: `MCP server ${e.payload.server} unavailable: ${e.payload.reason}`, tone: 'error' })
    case 'agent.compaction':
      return push({ kind: 'notice', key, text: `Context compacted (${e.payload.before} → ${e.payload.after} tokens)`, tone: 'info' })
    default:
      return t
  }
}

/** Entries that wait on a person and have not been answered. */
export const waiting = (t: Transcript): Entry[] =>
  t.entries.filter((x) => (x.kind === 'approval' && !x.resolved) || (x.kind === 'question' && x.answer === undefined) || (x.kind === 'function' && !x.resolved))
