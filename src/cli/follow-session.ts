// Follows a session's stream for `warren send` and `warren watch`: renders each event (or prints
// it as a JSON line), asks at the terminal what the agent waits for, and ends when `done` says so.
import { ok, type Warren, type WarrenEvent } from '../../sdk/src/index.ts'
import { howToAnswer, type Waiting } from './ask.ts'
import { askQueue } from './ask-queue.ts'
import { note, out } from './print.ts'
import { renderer } from './render-event.ts'

export type FollowOptions = {
  sdk: Warren
  sessionId: string
  /** Print events as JSON lines instead of rendering them. */
  json: boolean
  /** Ask approvals, questions and function outputs at the terminal. */
  interactive: boolean
  /** Stream cursor: omitted for live events only. */
  after?: number
  signal?: AbortSignal
  /** Called once the stream listens. */
  onOpen?: () => void
  /** True when following should stop after this event. */
  done?: (e: WarrenEvent) => boolean
}

const isWaiting = (e: WarrenEvent): e is Waiting => e.type === 'approval.requested' || e.type === 'question.asked' || e.type === 'tool.required'

export async function followSession(opts: FollowOptions): Promise<void> {
  const view = renderer((s) => process.stdout.write(s))
  // Asked while the stream goes on, so that an answer given elsewhere or the turn's end is seen.
  const asking = opts.interactive && !opts.json ? askQueue(opts.sdk, opts.sessionId, view.line) : null
  let opened = false
  try {
    for await (const e of opts.sdk.events({
      sessionId: opts.sessionId,
      after: opts.after,
      signal: opts.signal,
      onOpen: () => {
        if (!opened) opts.onOpen?.()
        opened = true
      },
      onReconnect: () => note('warren: the stream was cut; reconnecting where it stopped'),
    })) {
      asking?.observe(e)
      if (opts.json) out(JSON.stringify(e))
      else view.event(e)
      if (isWaiting(e) && !(await answered(opts, e))) {
        if (asking) {
          view.end()
          asking.ask(e)
        } else note(`warren: ${howToAnswer(opts.sessionId, e)}`)
      }
      if (opts.done?.(e)) break
    }
  } finally {
    await asking?.close()
    view.end()
  }
}

/** Whether a replayed wait was answered already (following from an earlier cursor replays old ones). */
async function answered(opts: FollowOptions, e: Waiting): Promise<boolean> {
  if (opts.after === undefined) return false
  const resolved = { 'approval.requested': 'approval.resolved', 'question.asked': 'question.answered', 'tool.required': 'tool.resolved' }[e.type]
  const page = await ok(opts.sdk.api.GET('/v1/sessions/{session_id}/items', { params: { path: { session_id: opts.sessionId }, query: { order: 'desc', limit: 100 } } }))
  return page.data.some((i) => i.detail.event === resolved && (i.detail as { toolCallId?: string }).toolCallId === e.payload.toolCallId)
}
