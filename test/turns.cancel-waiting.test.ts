import { it } from 'node:test'
import assert from 'node:assert/strict'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError } from './expect.ts'
import { expectLogMatchesSchemas } from './event-payloads.ts'
import { ACTIONS_ENV, createSession, details, getSession, newOrg, quiet, send, signals, waitForEvent, waitForStatus, type Org } from './turn-actions-helpers.ts'

const LOOKUP = { type: 'function', name: 'lookup_order', parameters: { type: 'object', properties: { id: { type: 'string' } } } }

/** The events the turn recorded from `from` (an event type) on, by type, without the webhook signals' data. */
async function logFrom(org: Org, sessionId: string, turnId: string, from: string): Promise<{ type: string; payload: any }[]> {
  const log = (await signals(org.w, sessionId)).filter((e) => e.turn_id === turnId)
  return log.slice(log.findIndex((e) => e.type === from) + 1).map(({ type, payload }) => ({ type, payload }))
}

const cancel = async (org: Org, sessionId: string, turnId: string) => {
  const res = await org.call('POST', `/v1/sessions/${sessionId}/turns/${turnId}/cancel`)
  assert.equal(res.statusCode, 200, res.body)
  assert.equal(res.json().status, 'cancelled')
}

// A turn that ends while it waits on a person or the caller closes what it waited on: each open
// call gets its resolving event and the model a tool result, in the transaction that settles the
// turn, so nobody is left looking at a request that can no longer be answered.
forEachDialect('turns ended while they wait', (dialect) => {
  const w = useWarren(dialect, { env: ACTIONS_ENV })

  it('a cancel closes the approval it waited on: approval.resolved (turn_ended) and a cancelled tool result before turn.ended', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { agent: { model: 'm1', approval_mode: 'ask' }, tools: [LOOKUP] })
    // The approval parks the step; the function call after it was never reached.
    org.fake.script({ toolCalls: [{ id: 'call_w', name: 'write_file', args: { path: 'a.txt', content: 'a' } }, { id: 'call_f', name: 'lookup_order', args: { id: 'X' } }] })
    const turn = await send(org, s.id, 'write a.txt')
    await waitForEvent(org, s.id, 'approval.requested')
    await quiet(w(), s.id)
    await cancel(org, s.id, turn.id)

    const after = await logFrom(org, s.id, turn.id, 'approval.requested')
    const reason = 'Not answered: the turn was cancelled.'
    assert.deepEqual(after.slice(0, 3), [
      { type: 'approval.resolved', payload: { toolCallId: 'call_w', approved: false, name: 'write_file', code: 'turn_ended', reason } },
      { type: 'agent.tool_result', payload: { toolCallId: 'call_w', toolName: 'write_file', isError: true, cancelled: true, summary: 'not run: the turn was cancelled' } },
      { type: 'turn.ended', payload: { turnId: turn.id } },
    ])
    // The function call was never asked of the caller: nothing resolves it, and it is no sandbox tool.
    assert.equal(after.filter((e) => e.type === 'tool.resolved' || e.type === 'tool.required').length, 0)
    const refused = expectError(await org.call('POST', `/v1/sessions/${s.id}/approvals/call_w`, { approved: true }), 409, 'conflict')
    assert.match(refused.message, /closed: its turn ended/)
    assert.equal((await getSession(org, s.id)).status, 'idle')

    // The next turn's request carries a result for both calls (or the provider would refuse it).
    org.fake.script({ text: 'ok' })
    const next = await send(org, s.id, 'never mind')
    await waitForEvent(org, s.id, 'turn.ended', (d) => d.turnId === next.id)
    const results = org.fake.modelRequests.at(-1)!.toolResults
    assert.deepEqual(results.map((r) => [r.toolCallId, r.isError]), [['call_w', true], ['call_f', true]])
    assert.match(results[0]!.content, /^Not run: the turn ended \(cancelled\)/)
  })

  it('a cancel closes the question it waited on: question.answered marked cancelled', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org)
    org.fake.script({ toolCalls: [{ id: 'call_q', name: 'ask_question', args: { question: 'Which one?' } }] })
    const turn = await send(org, s.id, 'ask me')
    await waitForEvent(org, s.id, 'question.asked')
    await quiet(w(), s.id)
    await cancel(org, s.id, turn.id)
    const after = await logFrom(org, s.id, turn.id, 'question.asked')
    assert.deepEqual(after.slice(0, 2), [
      { type: 'question.answered', payload: { toolCallId: 'call_q', answer: '', cancelled: true } },
      { type: 'turn.ended', payload: { turnId: turn.id } },
    ])
    expectError(await org.call('POST', `/v1/sessions/${s.id}/questions/call_q`, { answer: 'late' }), 409, 'conflict')
  })

  it('a cancel closes the caller functions it waited on: tool.resolved unsuccessful, marked cancelled; the session is idle', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { tools: [LOOKUP] })
    org.fake.script({ toolCalls: [{ id: 'call_f1', name: 'lookup_order', args: { id: 'A' } }, { id: 'call_f2', name: 'lookup_order', args: { id: 'B' } }] })
    const turn = await send(org, s.id, 'look both up')
    await waitForStatus(org, s.id, 'requires_action')
    await cancel(org, s.id, turn.id)
    const after = await logFrom(org, s.id, turn.id, 'session.action_required')
    assert.deepEqual(after.slice(0, 3), [
      { type: 'tool.resolved', payload: { toolCallId: 'call_f1', name: 'lookup_order', success: false, cancelled: true } },
      { type: 'tool.resolved', payload: { toolCallId: 'call_f2', name: 'lookup_order', success: false, cancelled: true } },
      { type: 'turn.ended', payload: { turnId: turn.id } },
    ])
    assert.equal((await getSession(org, s.id)).status, 'idle')
  })

  it('deleting a session closes what its turn waited on, in the transaction that cancels it', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { agent: { model: 'm1', approval_mode: 'ask' } })
    org.fake.script({ toolCalls: [{ id: 'call_d', name: 'bash', args: { command: 'echo hi' } }] })
    const turn = await send(org, s.id, 'run it')
    await waitForEvent(org, s.id, 'approval.requested')
    await quiet(w(), s.id)
    assert.equal((await org.call('DELETE', `/v1/sessions/${s.id}`)).statusCode, 200)
    const after = await logFrom(org, s.id, turn.id, 'approval.requested')
    assert.deepEqual(after.slice(0, 3), [
      { type: 'approval.resolved', payload: { toolCallId: 'call_d', approved: false, name: 'bash', code: 'turn_ended', reason: 'Not answered: the session was deleted.' } },
      { type: 'agent.tool_result', payload: { toolCallId: 'call_d', toolName: 'bash', isError: true, cancelled: true, summary: 'not run: the session was deleted' } },
      { type: 'turn.ended', payload: { turnId: turn.id } },
    ])
  })

  it('every event the suite recorded has the payload its schema gives its name', async () => {
    const seen = await expectLogMatchesSchemas(w())
    for (const name of ['approval.resolved', 'question.answered', 'tool.resolved', 'agent.tool_result']) assert.ok(seen.has(name), `the suite recorded no ${name}`)
  })
})
