import type { Command } from 'commander'
import { ok, type Warren } from '../../sdk/src/index.ts'
import { clientCommand } from './command.ts'
import { followSession } from './follow-session.ts'
import { EXIT, note, out, printJson } from './print.ts'

const interactive = () => process.stdin.isTTY === true && process.stdout.isTTY === true

/** The exit code a settled turn ends `warren send` with. */
const exitFor = (status: string) => (status === 'completed' ? EXIT.ok : status === 'cancelled' ? EXIT.turnCancelled : EXIT.turnFailed)

async function turnOf(sdk: Warren, sessionId: string, turnId: string) {
  return ok(sdk.api.GET('/v1/sessions/{session_id}/turns/{turn_id}', { params: { path: { session_id: sessionId, turn_id: turnId } } }))
}

export function turnCommands(program: Command): void {
  clientCommand<{ detach?: boolean }>(program, 'send <session> <text>', 'Send a message and follow the turn live until it settles', async ([sid, text], o, { sdk, json }) => {
    const sessionId = sid!
    const send = () => ok(sdk.api.POST('/v1/sessions/{session_id}/messages', { params: { path: { session_id: sessionId } }, body: { text: text! } }))
    if (o.detach) {
      const turn = await send()
      return json ? printJson(turn) : out(`${turn.id}  ${turn.status}`)
    }
    // The stream listens before the message goes, so the turn's first streamed words are not missed.
    const abort = new AbortController()
    let sent: ReturnType<typeof send> | undefined
    let turnId: string | undefined
    const ended = new Set<string>()
    const follow = followSession({
      sdk,
      sessionId,
      json,
      interactive: interactive(),
      signal: abort.signal,
      onOpen: () => {
        sent = send()
        sent.then((t) => (turnId = t.id), () => abort.abort())
      },
      done: (e) => {
        if (e.type === 'turn.ended') ended.add(e.payload.turnId)
        return turnId !== undefined && ended.has(turnId)
      },
    })
    await follow
    // A refused message ends the stream: its refusal is what to report.
    const turn = await (sent ?? send())
    const settled = await turnOf(sdk, sessionId, turn.id)
    if (json) printJson(settled)
    else note(`turn ${settled.id} ${settled.status}${settled.error ? `: ${(settled.error as { message?: string }).message ?? ''}` : ''}`)
    return exitFor(settled.status)
  }).option('--detach', 'print the accepted turn and return without following it')

  clientCommand<{ from?: string }>(program, 'watch <session>', "Follow a session's events live (Ctrl-C to stop)", async ([sid], o, { sdk, json }) => {
    const abort = new AbortController()
    process.once('SIGINT', () => abort.abort())
    await followSession({ sdk, sessionId: sid!, json, interactive: interactive(), signal: abort.signal, after: o.from !== undefined ? Number(o.from) : undefined })
  }).option('--from <seq>', 'replay what was persisted after this event (0: everything) before the live events')

  const turns = program.command('turns').description("A session's turns")
  clientCommand(turns, 'list <session>', "List a session's turns", async ([sid], _o, { sdk, json }) => {
    const page = await ok(sdk.api.GET('/v1/sessions/{session_id}/turns', { params: { path: { session_id: sid! } } }))
    if (json) return printJson(page)
    for (const t of page.data) out(`${t.id}  ${t.status}`)
  })
  clientCommand(turns, 'cancel <session> <turn>', 'Cancel a running or queued turn', async ([sid, tid], _o, { sdk, json }) => {
    const t = await ok(sdk.api.POST('/v1/sessions/{session_id}/turns/{turn_id}/cancel', { params: { path: { session_id: sid!, turn_id: tid! } } }))
    if (json) printJson(t)
    else out(`${t.id}  ${t.status}`)
  })

  for (const [verb, approved] of [['approve', true], ['deny', false]] as const) {
    clientCommand<{ reason?: string }>(program, `${verb} <session> <tool_call_id>`, `${approved ? 'Allow' : 'Refuse'} a tool call waiting for approval`, async ([sid, id], o, { sdk, json }) => {
      const a = await ok(sdk.api.POST('/v1/sessions/{session_id}/approvals/{tool_call_id}', { params: { path: { session_id: sid!, tool_call_id: id! } }, body: { approved, ...(o.reason ? { reason: o.reason } : {}) } }))
      if (json) printJson(a)
      else out(`${a.tool_call_id} ${approved ? 'approved' : 'refused'}`)
    }).option('--reason <text>', 'told to the agent with a refusal')
  }

  clientCommand<{ error?: boolean }>(program, 'answer <session> <call_id> <text>', "Answer the agent's question, or give a caller function's output", async ([sid, id, text], o, { sdk, json }) => {
    const session = await ok(sdk.api.GET('/v1/sessions/{session_id}', { params: { path: { session_id: sid! } } }))
    // A pending function call is a required action of the session; anything else is a question.
    const fn = session.required_actions?.some((ra) => ra.call_id === id)
    const answer = fn
      ? await ok(sdk.api.POST('/v1/sessions/{session_id}/required_actions/{call_id}', { params: { path: { session_id: sid!, call_id: id! } }, body: o.error ? { error: text! } : { output: text! } }))
      : await ok(sdk.api.POST('/v1/sessions/{session_id}/questions/{tool_call_id}', { params: { path: { session_id: sid!, tool_call_id: id! } }, body: { answer: text! } }))
    if (json) printJson(answer)
    else out(`${id} answered`)
  }).option('--error', 'for a function: TEXT is the message of its failure, not its output')
}
