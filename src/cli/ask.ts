// What the agent waits for, asked at the terminal when one is attached: an approval, a question, a
// caller function's output. Without a terminal the command says how to answer and goes on waiting.
import readline from 'node:readline/promises'
import { ok, WarrenError, type Warren, type WarrenEvent } from '../../sdk/src/index.ts'
import { argsLine } from './render-event.ts'

export type Waiting = Extract<WarrenEvent, { type: 'approval.requested' | 'question.asked' | 'tool.required' }>

/**
 * A wait being asked at the terminal. `stop` takes the prompt away (the wait was answered
 * elsewhere, or its turn ended); `answered` is set once the person has answered here, from when
 * the answer is on its way: its own resolving event then is no news.
 */
export type Asking = { stop: AbortController; answered: boolean }

async function prompt(question: string, signal: AbortSignal): Promise<string> {
  const rl = readline.createInterface({ input: process.stdin, output: process.stdout })
  try {
    return await rl.question(question, { signal })
  } finally {
    rl.close()
  }
}

/** How to answer `e` from another shell. */
export function howToAnswer(sessionId: string, e: Waiting): string {
  const id = e.payload.toolCallId
  if (e.type === 'approval.requested') return `waiting for approval of ${e.payload.name} (${id}): warren approve ${sessionId} ${id}  |  warren deny ${sessionId} ${id}`
  if (e.type === 'question.asked') return `waiting for an answer to "${e.payload.question}" (${id}): warren answer ${sessionId} ${id} TEXT`
  return `waiting for the output of function ${e.payload.name} (${id}): warren answer ${sessionId} ${id} OUTPUT`
}

/**
 * Asks at the terminal and sends the answer; an answer someone else gave first is not an error,
 * and a prompt taken away (`asking.stop`) sends nothing.
 */
export async function askAndAnswer(sdk: Warren, sessionId: string, e: Waiting, say: (line: string) => void, asking: Asking): Promise<void> {
  const id = e.payload.toolCallId
  const path = { session_id: sessionId, tool_call_id: id }
  const { signal } = asking.stop
  const ask = async (question: string) => {
    const text = await prompt(question, signal)
    if (signal.aborted) throw signal.reason
    return text
  }
  try {
    if (e.type === 'approval.requested') {
      const yes = /^y(es)?$/i.test((await ask(`Allow ${e.payload.name} ${argsLine(e.payload.args)}? [y/N] `)).trim())
      const reason = yes ? undefined : (await ask('Reason told to the agent (optional): ')).trim() || undefined
      asking.answered = true
      await ok(sdk.api.POST('/v1/sessions/{session_id}/approvals/{tool_call_id}', { params: { path }, body: { approved: yes, ...(reason ? { reason } : {}) } }))
    } else if (e.type === 'question.asked') {
      const options = e.payload.options?.length ? ` [${e.payload.options.join(' / ')}]` : ''
      const answer = (await ask(`${e.payload.question}${options} `)).trim()
      asking.answered = true
      await ok(sdk.api.POST('/v1/sessions/{session_id}/questions/{tool_call_id}', { params: { path }, body: { answer } }))
    } else {
      const output = await ask(`Output of ${e.payload.name}(${argsLine(e.payload.arguments)}): `)
      asking.answered = true
      await ok(sdk.api.POST('/v1/sessions/{session_id}/required_actions/{call_id}', { params: { path: { session_id: sessionId, call_id: id } }, body: { output } }))
    }
  } catch (err) {
    if (signal.aborted && !asking.answered) return
    if (err instanceof WarrenError && (err.code === 'conflict' || err.code === 'not_found')) return say(`  (already answered: ${err.message})`)
    throw err
  }
}
