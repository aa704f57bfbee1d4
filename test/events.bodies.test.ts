// Items and stream frames return each stored payload exactly as it was written, whatever the
// OpenAPI description says of it: every published persisted event, the internal one published
// under another name, and an older row whose payload carries a field the schemas do not list.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import type { AnyEvent } from '../src/events/events.schema.ts'
import { withEvents } from '../src/events/record-event.ts'
import { forEachDialect, useWarren } from './harness.ts'
import { connectModel, waitFor } from './fixtures.ts'
import { openSse, type SseClient } from './sse-client.ts'
import { NO_RATE_LIMITS } from './turns.helpers.ts'

const TURN = 'trn_bodies'

/** One of every persisted published event (session.error stands for agent.error too), and the item type the specification gives it. */
const WRITTEN: [AnyEvent, string, string][] = [
  [{ type: 'turn.started', payload: { turnId: TURN } }, 'turn.started', 'turn_started'],
  [{ type: 'user.message', payload: { text: 'hi "there"\nsecond line' } }, 'user.message', 'user_message'],
  [{ type: 'message.queued', payload: { text: 'later', position: 1 } }, 'message.queued', 'message_queued'],
  [{ type: 'message.dequeued', payload: { text: 'later', position: 1 } }, 'message.dequeued', 'message_dequeued'],
  [{ type: 'agent.message', payload: { text: 'done' } }, 'agent.message', 'message'],
  [{ type: 'agent.tool_call', payload: { toolCallId: 'call_1', toolName: 'bash', args: { command: 'ls', nested: [1, { a: null }] } } }, 'agent.tool_call', 'tool_call'],
  [{ type: 'agent.tool_result', payload: { toolCallId: 'call_1', toolName: 'bash', isError: false, cancelled: false, summary: 'ok' } }, 'agent.tool_result', 'tool_call'],
  [{ type: 'agent.compaction', payload: { before: 1000, after: 200 } }, 'agent.compaction', 'compaction'],
  [{ type: 'agent.error', payload: { message: 'boom', code: 'provider_error' } }, 'agent.error', 'error'],
  [{ type: 'session.error', payload: { message: 'seed failed', path: 'a/b.txt' } }, 'agent.error', 'error'],
  [{ type: 'agent.todos', payload: { items: [{ label: 'x', status: 'done' }] } }, 'agent.todos', 'todos'],
  [{ type: 'file.changed', payload: { path: 'a.txt', kind: 'created', diff: '+a' } }, 'file.changed', 'file_change'],
  [{ type: 'file.changed', payload: { path: 'b.txt', kind: 'deleted' } }, 'file.changed', 'file_change'],
  [{ type: 'approval.requested', payload: { toolCallId: 'call_2', name: 'bash', args: { command: 'rm x' }, sensitive: true } }, 'approval.requested', 'approval'],
  [{ type: 'approval.resolved', payload: { toolCallId: 'call_2', approved: false, name: 'bash', code: 'denied_by_rule', reason: 'no' } }, 'approval.resolved', 'approval'],
  [{ type: 'approval.resolved', payload: { toolCallId: 'call_3', approved: true } }, 'approval.resolved', 'approval'],
  [{ type: 'question.asked', payload: { toolCallId: 'call_4', question: 'Which?', options: ['a'], allowFreeform: false } }, 'question.asked', 'question'],
  [{ type: 'question.answered', payload: { toolCallId: 'call_4', answer: 'a' } }, 'question.answered', 'question'],
  [{ type: 'tool.required', payload: { toolCallId: 'call_5', name: 'lookup', arguments: { id: 7 } } }, 'tool.required', 'function_call'],
  [{ type: 'tool.resolved', payload: { toolCallId: 'call_5', name: 'lookup', success: true } }, 'tool.resolved', 'function_call'],
  [{ type: 'mcp.unavailable', payload: { server: 'docs', reason: 'refused' } }, 'mcp.unavailable', 'mcp_unavailable'],
  [{ type: 'sandbox.image_progress', payload: { state: 'pending', ref: 'localhost:5000/go:1', bytes: 10, totalBytes: 30, layers: 3, layersLeft: 2 } }, 'sandbox.image_progress', 'sandbox'],
  [{ type: 'sandbox.paused', payload: { state: 'paused' } }, 'sandbox.paused', 'sandbox'],
  [{ type: 'sandbox.resumed', payload: { state: 'running' } }, 'sandbox.resumed', 'sandbox'],
  [{ type: 'preview.ready', payload: { port: 3000, url: 'http://x.preview.localhost' } }, 'preview.ready', 'preview'],
  [{ type: 'workspace.recovery_failed', payload: { message: 'gone' } }, 'workspace.recovery_failed', 'error'],
  [{ type: 'artifact.created', payload: { id: 'art_1', path: 'out.txt', size_bytes: 3, turn_id: TURN } }, 'artifact.created', 'artifact'],
  // Written by an older version: a field no schema lists still comes back as stored.
  [{ type: 'agent.message', payload: { text: 'old', legacy: { kept: true } } as unknown as { text: string } }, 'agent.message', 'message'],
  [{ type: 'turn.ended', payload: { turnId: TURN } }, 'turn.ended', 'turn_ended'],
]

forEachDialect('items and frames return stored payloads as written', (dialect) => {
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_SSE_PING_MS: '120000' } })
  let sid = ''
  let rows: { seq: number; created_at: number }[] = []
  const open: SseClient[] = []
  after(() => open.forEach((c) => c.close()))

  before(async () => {
    await connectModel(w())
    const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })
    assert.equal(res.statusCode, 201, res.body)
    sid = res.json().id
    await waitFor('the workspace', () => w().store.db.selectFrom('events').select('seq').where('session_id', '=', sid).where('type', '=', 'sandbox.created').executeTakeFirst())
    const seqs = await withEvents(w().store, w().bus, async (_trx, record) => {
      const out: number[] = []
      for (const [e] of WRITTEN) out.push((await record({ orgId: w().orgId, sessionId: sid, turnId: TURN, type: e.type, payload: e.payload })).seq)
      return out
    })
    rows = await Promise.all(seqs.map(async (seq) => ({ seq, created_at: Number((await w().store.db.selectFrom('events').select('created_at').where('seq', '=', seq).executeTakeFirstOrThrow()).created_at) })))
  })

  it('items: the whole body, every detail its event name and the payload as stored', async () => {
    const res = await w().inject({ method: 'GET', url: `/v1/sessions/${sid}/items?order=asc&limit=100&turn_id=${TURN}` })
    assert.equal(res.statusCode, 200, res.body)
    const data = WRITTEN.map(([e, name, item], i) => ({ object: 'item', id: `itm_${rows[i]!.seq}`, type: item, turn_id: TURN, created_at: rows[i]!.created_at, detail: { event: name, ...e.payload } }))
    assert.deepEqual(res.json(), { object: 'list', data, has_more: false, last_id: data.at(-1)!.id })
  })

  it('stream frames: the whole data line of each replayed event, payload as stored', async () => {
    const c = await openSse(await w().listen(), `/v1/sessions/${sid}/events`, { token: w().token, lastEventId: String(rows[0]!.seq - 1) })
    open.push(c)
    const frames = await c.until('every written event', (ev) => ev.filter((f) => f.id !== undefined).length >= WRITTEN.length)
    const got = frames.filter((f) => f.id !== undefined).slice(0, WRITTEN.length)
    const want = WRITTEN.map(([e, name], i) => ({
      id: String(rows[i]!.seq),
      event: name,
      data: { object: 'event', type: name, internal_type: e.type, session_id: sid, seq: rows[i]!.seq, created_at: rows[i]!.created_at, payload: e.payload },
    }))
    assert.deepEqual(got.map((f) => ({ id: f.id, event: f.event, data: f.data })), want)
  })
})
