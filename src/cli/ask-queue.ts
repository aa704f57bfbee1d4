// The waits `warren send` and `warren watch` ask at the terminal, one at a time, while the stream
// goes on: a wait answered elsewhere (another shell, the console) or whose turn ended is not asked
// any more, its prompt taken away, instead of waiting for a person whose answer can only be refused.
import type { Warren, WarrenEvent } from '../../sdk/src/index.ts'
import { askAndAnswer, type Asking, type Waiting } from './ask.ts'
import { report } from './print.ts'

/** The event that closes each kind of wait; every one carries the wait's toolCallId. */
const RESOLVES: Record<string, Waiting['type']> = { 'approval.resolved': 'approval.requested', 'question.answered': 'question.asked', 'tool.resolved': 'tool.required' }

export type AskQueue = {
  ask(e: Waiting): void
  /** Takes an event of the stream into account before it is shown: one that closes a wait ends its prompt. */
  observe(e: WarrenEvent): void
  /** Takes the prompt away and asks nothing more. */
  close(): Promise<void>
}

export function askQueue(sdk: Warren, sessionId: string, say: (line: string) => void): AskQueue {
  const queue: Waiting[] = []
  let current: { e: Waiting; asking: Asking } | null = null
  let idle: Promise<void> = Promise.resolve()

  function next(): void {
    if (current || queue.length === 0) return
    const e = queue.shift()!
    const now = (current = { e, asking: { stop: new AbortController(), answered: false } })
    // A refused answer is reported (and sets the exit code); the stream and the next wait go on.
    idle = askAndAnswer(sdk, sessionId, e, say, now.asking)
      .catch(report)
      .finally(() => {
        current = null
        next()
      })
  }

  /** Ends the prompt with why it went away (readline ends the prompt's line as it closes). */
  function takeAway(why: string): void {
    if (!current || current.asking.answered || current.asking.stop.signal.aborted) return
    current.asking.stop.abort()
    say(`  (${why})`)
  }

  return {
    ask(e) {
      queue.push(e)
      next()
    },
    observe(e) {
      if (e.type === 'turn.ended') {
        // A session runs one turn at a time: every wait left belonged to the turn that ended.
        queue.length = 0
        return takeAway('the turn ended')
      }
      const kind = RESOLVES[e.type]
      if (!kind) return
      const p = e.payload as { toolCallId: string; cancelled?: boolean; code?: string }
      const at = queue.findIndex((w) => w.type === kind && w.payload.toolCallId === p.toolCallId)
      if (at >= 0) queue.splice(at, 1)
      // Closed by the service as its turn ended (the turn.ended that follows finds nothing left).
      const ended = p.cancelled === true || p.code === 'turn_ended'
      if (current?.e.type === kind && current.e.payload.toolCallId === p.toolCallId) takeAway(ended ? 'the turn ended' : 'answered elsewhere')
    },
    async close() {
      queue.length = 0
      takeAway('no longer followed')
      await idle
    },
  }
}
