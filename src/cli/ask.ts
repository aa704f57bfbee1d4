// What the agent waits for, asked at the terminal when one is attached: an approval, a question, a
// caller function's output. Without a terminal the command says how to answer and goes on waiting.
import readline from 'node:readline/promises'
import { ok, WarrenError, type Warren, type WarrenEvent } from '../../sdk/src/index.ts'
import { argsLine } from './render-event.ts'

export type Waiting = Extract<WarrenEvent, { type: 'approval.requested' | 'question.asked' | 'tool.required' }>

async function prompt(question: string): Promise<string> {
  const rl = readline.createInterface({ input: process.stdin, output: process.stdout })
  try {
    return await rl.question(question)
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

/** Asks at the terminal and sends the answer; an answer someone else gave first is not an error. */
export async function askAndAnswer(sdk: Warren, sessionId: string, e: Waiting, say: (line: string) => void): Promise<void> {
  const id = e.payload.toolCallId
  const path = { session_id: sessionId, tool_call_id: id }
  try {
    if (e.type === 'approval.requested') {
      const yes = /^y(es)?$/i.test((await prompt(`Allow ${e.payload.name} ${argsLine(e.payload.args)}? [y/N] `)).trim())
      const reason = yes ? undefined : (await prompt('Reason told to the agent (optional): ')).trim() || undefined
      await ok(sdk.api.POST('/v1/sessions/{session_id}/approvals/{tool_call_id}', { params: { path }, body: { approved: yes, ...(reason ? { reason } : {}) } }))
    } else if (e.type === 'question.asked') {
      const options = e.payload.options?.length ? ` [${e.payload.options.join(' / ')}]` : ''
      const answer = (await prompt(`${e.payload.question}${options} `)).trim()
      await ok(sdk.api.POST('/v1/sessions/{session_id}/questions/{tool_call_id}', { params: { path }, body: { answer } }))
    } else {
      const output = await prompt(`Output of ${e.payload.name}(${argsLine(e.payload.arguments)}): `)
      await ok(sdk.api.POST('/v1/sessions/{session_id}/required_actions/{call_id}', { params: { path: { session_id: sessionId, call_id: id } }, body: { output } }))
    }
  } catch (err) {
    if (err instanceof WarrenError && (err.code === 'conflict' || err.code === 'not_found')) return say(`  (already answered: ${err.message})`)
    throw err
  }
}
