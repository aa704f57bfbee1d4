import { it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError } from './expect.ts'
import {
  ACTIONS_ENV,
  createSession,
  details,
  getSession,
  getTurn,
  newOrg,
  quiet,
  resultOf,
  send,
  settledTurn,
  signals,
  waitForEvent,
  waitForStatus,
  type Org,
} from './turn-actions-helpers.ts'
import { waitFor } from './fixtures.ts'
import { hostWorkspace } from './host-workspace.ts'
import { expectLogMatchesSchemas } from './event-payloads.ts'

const LOOKUP = {
  type: 'function',
  name: 'lookup_order',
  description: 'Look up an order by its id.',
  parameters: { type: 'object', properties: { id: { type: 'string' } } },
}
const BUILTINS = ['bash', 'read_file', 'write_file', 'edit_file', 'list_files', 'grep', 'todo_write', 'ask_question']
const RA_KEYS = ['arguments', 'call_id', 'created_at', 'expires_at', 'name', 'turn_id', 'type']

const byCallId = (a: { call_id: string }, b: { call_id: string }) => a.call_id.localeCompare(b.call_id)
const answer = (org: Org, sessionId: string, callId: string, body: unknown) => org.call('POST', `/v1/sessions/${sessionId}/required_actions/${callId}`, body)

forEachDialect('turn questions, caller functions and tool events', (dialect) => {
  const w = useWarren(dialect, { env: ACTIONS_ENV })

  it('ask_question: question.asked, the turn waits working, the answer becomes the tool result', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org)
    org.fake.script({ toolCalls: [{ id: 'call_q', name: 'ask_question', args: { question: 'Which one?', options: ['a', 'b'], allow_freeform: false } }] }, { text: 'You chose b.' })
    const turn = await send(org, s.id, 'pick one')
    const asked = await waitForEvent(org, s.id, 'question.asked')
    assert.deepEqual(asked, { event: 'question.asked', toolCallId: 'call_q', question: 'Which one?', options: ['a', 'b'], allowFreeform: false })
    await quiet(w(), s.id)
    const waiting = await getSession(org, s.id)
    assert.equal(waiting.status, 'working', 'a question is not a required action: the session stays working')
    assert.deepEqual(waiting.required_actions, [])
    assert.equal((await getTurn(org, s.id, turn.id)).status, 'working')
    assert.equal(org.fake.modelRequests.length, 1)

    expectError(await org.call('POST', `/v1/sessions/${s.id}/approvals/call_q`, { approved: true }), 404, 'not_found')
    expectError(await answer(org, s.id, 'call_q', { output: 'b' }), 404, 'not_found')
    expectError(await org.call('POST', `/v1/sessions/${s.id}/questions/call_nope`, { answer: 'b' }), 404, 'not_found')
    expectError(await org.call('POST', `/v1/sessions/${s.id}/questions/call_q`, { answer: '' }), 400, 'invalid_request')
    assert.equal((await getTurn(org, s.id, turn.id)).status, 'working', 'refused answers leave the question open')

    const res = await org.call('POST', `/v1/sessions/${s.id}/questions/call_q`, { answer: 'b' })
    assert.equal(res.statusCode, 200, res.body)
    const q = res.json()
    assert.equal(q.object, 'question')
    assert.equal(q.tool_call_id, 'call_q')
    assert.equal(q.session_id, s.id)
    assert.equal(q.turn_id, turn.id)
    assert.equal(q.question, 'Which one?')
    assert.equal(q.answer, 'b')
    assert.ok(q.resolved_at >= q.created_at)
    expectError(await org.call('POST', `/v1/sessions/${s.id}/questions/call_q`, { answer: 'a' }), 409, 'conflict')

    assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed')
    assert.deepEqual(await details(org, s.id, 'question.answered'), [{ event: 'question.answered', toolCallId: 'call_q', answer: 'b' }])
    const r = resultOf(org.fake.modelRequests[1]!, 'call_q')
    assert.equal(r.content, 'b')
    assert.equal(r.isError, undefined)
    assert.equal(org.fake.modelRequests.length, 2)
  })

  it('ask_question with allow_freeform false refuses an answer outside the options', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org)
    org.fake.script({ toolCalls: [{ id: 'call_q2', name: 'ask_question', args: { question: 'Red or blue?', options: ['red', 'blue'], allow_freeform: false } }] }, { text: 'ok' })
    const turn = await send(org, s.id, 'pick a colour')
    await waitForEvent(org, s.id, 'question.asked')
    // The service tells the model that allow_freeform is "whether an answer outside the options is accepted".
    const outside = await org.call('POST', `/v1/sessions/${s.id}/questions/call_q2`, { answer: 'green' })
    expectError(outside, 400, 'invalid_request')
    assert.equal((await getTurn(org, s.id, turn.id)).status, 'working')
    assert.equal((await org.call('POST', `/v1/sessions/${s.id}/questions/call_q2`, { answer: 'blue' })).statusCode, 200)
    assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed')
    assert.equal(resultOf(org.fake.modelRequests[1]!, 'call_q2').content, 'blue')
  })

  it("caller functions: two calls in one step make required actions, answered one by one; the outputs reach the model", async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { tools: [LOOKUP] })
    org.fake.script(
      {
        text: 'Looking both up.',
        toolCalls: [
          { id: 'call_o1', name: 'lookup_order', args: { id: 'A-1' } },
          { id: 'call_o2', name: 'lookup_order', args: { id: 'B-2' } },
        ],
      },
      { text: 'A-1 shipped; B-2 not found.' },
    )
    const turn = await send(org, s.id, 'where are my orders?')
    const parked = await waitForStatus(org, s.id, 'requires_action')

    const offered = org.fake.modelRequests[0]!
    for (const name of [...BUILTINS, 'lookup_order']) assert.ok(offered.tools.includes(name), `the model is offered ${name}: ${offered.tools}`)
    const wireTool = (offered.body.tools as any[]).find((x) => x.name === 'lookup_order')
    assert.equal(wireTool.description, LOOKUP.description)
    assert.deepEqual(wireTool.input_schema.properties, LOOKUP.parameters.properties)

    const ras = [...parked.required_actions].sort(byCallId)
    assert.equal(ras.length, 2, JSON.stringify(parked.required_actions))
    for (const [ra, callId, id] of [[ras[0], 'call_o1', 'A-1'], [ras[1], 'call_o2', 'B-2']] as const) {
      assert.deepEqual(Object.keys(ra).sort(), RA_KEYS)
      assert.deepEqual({ ...ra, created_at: 0, expires_at: 0 }, { type: 'function_call', turn_id: turn.id, call_id: callId, name: 'lookup_order', arguments: { id }, created_at: 0, expires_at: 0 })
      assert.equal(typeof ra.created_at, 'number')
      assert.ok(ra.created_at >= (await getTurn(org, s.id, turn.id)).created_at)
      assert.ok(ra.expires_at >= ra.created_at, 'expires_at is not before created_at')
    }
    const required = await details(org, s.id, 'tool.required')
    assert.deepEqual(
      required.sort((a, b) => String(a.toolCallId).localeCompare(String(b.toolCallId))),
      [
        { event: 'tool.required', toolCallId: 'call_o1', name: 'lookup_order', arguments: { id: 'A-1' } },
        { event: 'tool.required', toolCallId: 'call_o2', name: 'lookup_order', arguments: { id: 'B-2' } },
      ],
    )
    assert.deepEqual(await details(org, s.id, 'agent.tool_call'), [], 'a caller function is not a sandbox tool call')

    // A restarted caller reads the whole list from the session and from the listing.
    const list = await org.call('GET', '/v1/sessions?limit=100')
    assert.equal(list.statusCode, 200, list.body)
    const listed = list.json().data.find((x: { id: string }) => x.id === s.id)
    assert.equal(listed.status, 'requires_action')
    assert.deepEqual([...listed.required_actions].sort(byCallId), ras)
    const filtered = (await org.call('GET', '/v1/sessions?status=requires_action')).json()
    assert.deepEqual(filtered.data.map((x: { id: string }) => x.id), [s.id])

    const signal = (await signals(w(), s.id)).find((e) => e.type === 'session.action_required')
    assert.ok(signal, 'session.action_required is in the event log')
    assert.equal(signal.payload.session_id, s.id)
    assert.equal(signal.payload.required_action.type, 'function_call')
    assert.equal((await getTurn(org, s.id, turn.id)).status, 'working', 'a parked turn stays working')
    await quiet(w(), s.id)
    assert.equal(org.fake.modelRequests.length, 1)

    const first = await answer(org, s.id, 'call_o1', { output: { status: 'shipped' } })
    assert.equal(first.statusCode, 200, first.body)
    assert.equal(first.json().object, 'session')
    assert.equal(first.json().id, s.id)
    assert.equal(first.json().status, 'requires_action')
    assert.deepEqual(first.json().required_actions, [ras[1]])
    assert.deepEqual(await waitForEvent(org, s.id, 'tool.resolved'), { event: 'tool.resolved', toolCallId: 'call_o1', name: 'lookup_order', success: true })
    await quiet(w(), s.id)
    assert.equal(org.fake.modelRequests.length, 1, 'the model waits for every answer of the step')
    const half = await getSession(org, s.id)
    assert.equal(half.status, 'requires_action')
    assert.deepEqual(half.required_actions, [ras[1]])

    const second = await answer(org, s.id, 'call_o2', { error: 'not found' })
    assert.equal(second.statusCode, 200, second.body)
    assert.notEqual(second.json().status, 'requires_action')
    assert.deepEqual(second.json().required_actions, [])
    assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed')
    assert.deepEqual(
      (await details(org, s.id, 'tool.resolved')).map((d) => [d.toolCallId, d.name, d.success]),
      [
        ['call_o1', 'lookup_order', true],
        ['call_o2', 'lookup_order', false],
      ],
    )
    const done = await getSession(org, s.id)
    assert.equal(done.status, 'idle')
    assert.deepEqual(done.required_actions, [])
    const statuses = (await signals(w(), s.id)).filter((e) => e.type.startsWith('session.') && e.type !== 'session.created').map((e) => e.type)
    assert.deepEqual(statuses, ['session.working', 'session.action_required', 'session.working', 'session.idle'])

    assert.equal(org.fake.modelRequests.length, 2)
    const next = org.fake.modelRequests[1]!
    const o1 = resultOf(next, 'call_o1')
    assert.deepEqual(JSON.parse(o1.content), { status: 'shipped' })
    assert.equal(o1.isError, undefined)
    const o2 = resultOf(next, 'call_o2')
    assert.ok(o2.content.includes('not found'), o2.content)
    assert.equal(o2.isError, true)
  })

  it('required actions: 404 for an unknown call, 400 unless exactly one of output/error, output null accepted, 409 twice', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { agent: { model: 'm1', tools: [{ type: 'function', name: 'lookup_order' }] } })
    org.fake.script(
      { toolCalls: [{ id: 'call_v1', name: 'lookup_order', args: { id: 'C-3' } }] },
      { toolCalls: [{ id: 'call_v2', name: 'lookup_order', args: { id: 'C-4' } }] },
      { text: 'Nothing there.' },
    )
    const turn = await send(org, s.id, 'look it up')
    await waitForStatus(org, s.id, 'requires_action')

    expectError(await answer(org, s.id, 'call_nope', { output: 1 }), 404, 'not_found')
    expectError(await answer(org, s.id, 'call_v1', { output: { ok: true }, error: 'boom' }), 400, 'invalid_request')
    expectError(await answer(org, s.id, 'call_v1', {}), 400, 'invalid_request')
    expectError(await org.call('POST', `/v1/sessions/${s.id}/approvals/call_v1`, { approved: true }), 404, 'not_found')
    const still = await getSession(org, s.id)
    assert.equal(still.status, 'requires_action', 'refused answers consume nothing')
    assert.equal(still.required_actions.length, 1)

    const ok = await answer(org, s.id, 'call_v1', { output: null })
    assert.equal(ok.statusCode, 200, ok.body)
    expectError(await answer(org, s.id, 'call_v1', { output: 1 }), 409, 'conflict')
    expectError(await answer(org, s.id, 'call_v1', { error: 'late' }), 409, 'conflict')
    // The next step calls it again: a string output reaches the model as it is.
    await waitFor('the second call', async () => (await getSession(org, s.id)).required_actions.some((r: { call_id: string }) => r.call_id === 'call_v2'))
    const r1 = resultOf(org.fake.modelRequests[1]!, 'call_v1')
    assert.equal(r1.content, 'null', 'output null is the JSON text null')
    assert.equal(r1.isError, undefined)
    assert.equal((await answer(org, s.id, 'call_v2', { output: 'plain "text"' })).statusCode, 200)
    assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed')
    assert.deepEqual(await details(org, s.id, 'tool.resolved'), [
      { event: 'tool.resolved', toolCallId: 'call_v1', name: 'lookup_order', success: true },
      { event: 'tool.resolved', toolCallId: 'call_v2', name: 'lookup_order', success: true },
    ])
    assert.equal(resultOf(org.fake.modelRequests[2]!, 'call_v2').content, 'plain "text"')
  })

  it('turns whose function call comes while their workspaces come up all park (no failure from the two starting together)', async (t) => {
    const org = await newOrg(w(), t)
    org.fake.fallback = { toolCalls: [{ name: 'lookup_order', args: { id: 'Z-9' } }] }
    // Each session's workspace comes up in the background while its first step calls the
    // function: the turn's transition and the workspace's must not break each other.
    const started = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const s = await createSession(org, { tools: [LOOKUP] }, { waitForWorkspace: false })
        return { s, turn: await send(org, s.id, 'look it up') }
      }),
    )
    for (const { s, turn } of started) {
      const { ses, tr } = await waitFor(`session ${s.id} parks or its turn settles`, async () => {
        const [ses, tr] = await Promise.all([getSession(org, s.id), getTurn(org, s.id, turn.id)])
        return (ses.status === 'requires_action' || tr.status !== 'working') && { ses, tr }
      })
      assert.equal(tr.status, 'working', `turn ${turn.id} ended ${tr.status}: ${JSON.stringify(tr.error)}`)
      assert.equal(ses.status, 'requires_action')
      assert.equal(ses.required_actions.length, 1)
    }
  })

  it('cancelling a turn parked on a function call clears the required action; answering afterwards is 409', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { tools: [LOOKUP] })
    org.fake.script({ toolCalls: [{ id: 'call_c1', name: 'lookup_order', args: { id: 'D-4' } }] })
    const turn = await send(org, s.id, 'look it up')
    await waitForStatus(org, s.id, 'requires_action')
    const res = await org.call('POST', `/v1/sessions/${s.id}/turns/${turn.id}/cancel`)
    assert.equal(res.statusCode, 200, res.body)
    assert.equal(res.json().status, 'cancelled')
    assert.equal(typeof res.json().completed_at, 'number')
    const after = await getSession(org, s.id)
    assert.deepEqual(after.required_actions, [])
    assert.equal(after.status, 'idle')
    expectError(await answer(org, s.id, 'call_c1', { output: 'late' }), 409, 'conflict')
    await quiet(w(), s.id)
    assert.equal(org.fake.modelRequests.length, 1, 'a late answer does not wake the model')
    assert.equal((await getTurn(org, s.id, turn.id)).status, 'cancelled')
  })

  it('todo_write emits agent.todos; write_file then edit_file emit file.changed with diffs; an unknown tool gets an error result', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org)
    const todo = [
      { label: 'Write notes', status: 'in_progress' },
      { label: 'Fix the typo', status: 'pending' },
    ]
    org.fake.script(
      { toolCalls: [{ id: 'call_t1', name: 'todo_write', args: { items: todo } }] },
      { toolCalls: [{ id: 'call_f1', name: 'write_file', args: { path: 'notes.txt', content: 'alpha\nbeta\ngamma\n' } }] },
      { toolCalls: [{ id: 'call_f2', name: 'edit_file', args: { path: 'notes.txt', old_string: 'beta', new_string: 'BETA' } }] },
      { toolCalls: [{ id: 'call_u1', name: 'no_such_tool', args: { x: 1 } }] },
      { text: 'All done.' },
    )
    const turn = await send(org, s.id, 'take notes')
    assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed', 'an unknown tool does not end the turn')
    assert.equal(org.fake.modelRequests.length, 5)

    assert.deepEqual(await details(org, s.id, 'agent.todos'), [{ event: 'agent.todos', items: todo }])
    const tr = resultOf(org.fake.modelRequests[1]!, 'call_t1')
    assert.equal(tr.isError, undefined)
    assert.ok(tr.content.length > 0)

    const changes = await details(org, s.id, 'file.changed')
    assert.deepEqual(changes.map((c) => [c.path, c.kind]), [
      ['notes.txt', 'created'],
      ['notes.txt', 'modified'],
    ])
    const created = String(changes[0]!.diff).split('\n')
    for (const l of ['+alpha', '+beta', '+gamma']) assert.ok(created.includes(l), `created diff has ${l}: ${changes[0]!.diff}`)
    const modified = String(changes[1]!.diff).split('\n')
    for (const l of ['-beta', '+BETA']) assert.ok(modified.includes(l), `modified diff has ${l}: ${changes[1]!.diff}`)
    assert.ok(!modified.includes('+alpha') && !modified.includes('-alpha'), `only the changed line is marked: ${changes[1]!.diff}`)
    assert.equal(fs.readFileSync(path.join(hostWorkspace(w(), s.id), 'notes.txt'), 'utf8'), 'alpha\nBETA\ngamma\n')

    const unknown = resultOf(org.fake.modelRequests[4]!, 'call_u1')
    assert.equal(unknown.isError, true, `an unknown tool is an error result: ${unknown.content}`)
    assert.ok(unknown.content.includes('no_such_tool'), unknown.content)
    assert.deepEqual((await details(org, s.id, 'agent.message')).map((d) => d.text), ['All done.'])
  })

  it('every event the suite recorded has the payload its schema gives its name', async () => {
    const seen = await expectLogMatchesSchemas(w())
    for (const name of ['question.asked', 'question.answered', 'tool.required', 'tool.resolved', 'agent.tool_call', 'agent.tool_result', 'agent.todos', 'file.changed', 'session.action_required', 'turn.completed']) {
      assert.ok(seen.has(name), `the suite recorded no ${name}`)
    }
  })
})
