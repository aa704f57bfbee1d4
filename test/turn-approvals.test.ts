import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { forEachDialect, useWarren } from './harness.ts'
import { expectError } from './expect.ts'
import { expectLogMatchesSchemas } from './event-payloads.ts'
import { ACTIONS_ENV, b64, createSession, details, getSession, getTurn, newOrg, quiet, resultOf, send, settledTurn, waitForEvent } from './turn-actions-helpers.ts'
import { hostWorkspace } from './host-workspace.ts'

forEachDialect('turn approvals and permissions', (dialect) => {
  const w = useWarren(dialect, { env: ACTIONS_ENV })

  it('ask: a writing tool waits for approval; approved it runs, refused the model is told why; a read runs without asking', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { agent: { model: 'm1', approval_mode: 'ask' } })
    const dir = hostWorkspace(w(), s.id)
    const args1 = { path: 'out.txt', content: 'approved text\n' }
    org.fake.script({ toolCalls: [{ id: 'call_w1', name: 'write_file', args: args1 }] }, { text: 'Wrote it.' })
    const turn = await send(org, s.id, 'write out.txt')

    const asked = await waitForEvent(org, s.id, 'approval.requested')
    assert.deepEqual(asked, { event: 'approval.requested', toolCallId: 'call_w1', name: 'write_file', args: args1, sensitive: true })
    await quiet(w(), s.id)
    assert.equal((await getTurn(org, s.id, turn.id)).status, 'working', 'the turn waits, still working')
    assert.equal((await getSession(org, s.id)).status, 'working', 'the session is working while a person decides')
    assert.equal(fs.existsSync(path.join(dir, 'out.txt')), false, 'nothing is written before the approval')
    assert.equal(org.fake.modelRequests.length, 1, 'the model is not asked again while the call waits')
    assert.deepEqual(await details(org, s.id, 'approval.resolved'), [])

    expectError(await org.call('POST', `/v1/sessions/${s.id}/approvals/call_nope`, { approved: true }), 404, 'not_found')
    // Another organization cannot see the session, let alone answer for it.
    expectError(await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/approvals/call_w1`, payload: { approved: true } }), 404, 'not_found')
    expectError(await org.call('POST', `/v1/sessions/${s.id}/approvals/call_w1`, { approved: 'yes' }), 400, 'invalid_request')
    const ok = await org.call('POST', `/v1/sessions/${s.id}/approvals/call_w1`, { approved: true })
    assert.equal(ok.statusCode, 200, ok.body)
    const a = ok.json()
    assert.deepEqual(Object.keys(a).sort(), ['approved', 'args', 'created_at', 'name', 'object', 'reason', 'resolved_at', 'session_id', 'tool_call_id', 'turn_id'])
    assert.deepEqual(
      { ...a, created_at: 0, resolved_at: 0 },
      { object: 'approval', tool_call_id: 'call_w1', session_id: s.id, turn_id: turn.id, name: 'write_file', args: args1, approved: true, reason: null, created_at: 0, resolved_at: 0 },
    )
    assert.equal(typeof a.created_at, 'number')
    assert.ok(a.resolved_at >= a.created_at, 'resolved_at is not before created_at')
    expectError(await org.call('POST', `/v1/sessions/${s.id}/approvals/call_w1`, { approved: false }), 409, 'conflict')

    assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed')
    assert.deepEqual(await details(org, s.id, 'approval.resolved'), [{ event: 'approval.resolved', toolCallId: 'call_w1', approved: true }])
    assert.equal(fs.readFileSync(path.join(dir, 'out.txt'), 'utf8'), 'approved text\n')
    const r1 = resultOf(org.fake.modelRequests[1]!, 'call_w1')
    assert.equal(r1.isError, undefined, `the approved call succeeded: ${r1.content}`)
    assert.doesNotMatch(r1.content, /^Not run/)

    // Second turn: a read runs without asking; the write after it is refused with a reason.
    org.fake.script(
      { toolCalls: [{ id: 'call_r1', name: 'read_file', args: { path: 'out.txt' } }] },
      { toolCalls: [{ id: 'call_w2', name: 'write_file', args: { path: 'refused.txt', content: 'no\n' } }] },
      { text: 'Understood.' },
    )
    const turn2 = await send(org, s.id, 'read it, then write refused.txt')
    await waitForEvent(org, s.id, 'approval.requested', (d) => d.toolCallId === 'call_w2')
    await quiet(w(), s.id)
    assert.deepEqual(
      (await details(org, s.id, 'approval.requested')).map((d) => d.toolCallId),
      ['call_w1', 'call_w2'],
      'read_file ran without an approval request',
    )
    assert.match(resultOf(org.fake.modelRequests[3]!, 'call_r1').content, /approved text/)
    assert.equal(org.fake.modelRequests.length, 4)

    const reason = 'Not that file, please.'
    const no = await org.call('POST', `/v1/sessions/${s.id}/approvals/call_w2`, { approved: false, reason })
    assert.equal(no.statusCode, 200, no.body)
    assert.equal(no.json().approved, false)
    assert.equal(no.json().reason, reason)
    assert.equal(no.json().turn_id, turn2.id)
    assert.equal((await settledTurn(org, s.id, turn2.id)).status, 'completed', 'a refusal does not end the turn')
    const resolved = (await details(org, s.id, 'approval.resolved')).find((d) => d.toolCallId === 'call_w2')
    assert.deepEqual(resolved, { event: 'approval.resolved', toolCallId: 'call_w2', approved: false, name: 'write_file', code: 'denied_by_user', reason })
    assert.equal(org.fake.modelRequests.length, 5)
    const r2 = resultOf(org.fake.modelRequests[4]!, 'call_w2')
    assert.equal(r2.isError, true, 'a refused call reaches the model as an error result')
    assert.match(r2.content, /^Not run:/)
    assert.ok(r2.content.includes(reason), `the reason reaches the model: ${r2.content}`)
    assert.equal(fs.existsSync(path.join(dir, 'refused.txt')), false)
    expectError(await org.call('POST', `/v1/sessions/${s.id}/approvals/call_w2`, { approved: true }), 409, 'conflict')
  })

  it('a tool-call id the model repeats (as some OpenAI-compatible servers do) never finds the earlier call’s approval', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { agent: { model: 'm1', approval_mode: 'ask' } })
    const dir = hostWorkspace(w(), s.id)
    org.fake.script(
      { toolCalls: [{ id: 'dup', name: 'write_file', args: { path: 'a.txt', content: 'a\n' } }] },
      { toolCalls: [{ id: 'dup', name: 'write_file', args: { path: 'b.txt', content: 'b\n' } }] },
      { text: 'done' },
    )
    const turn = await send(org, s.id, 'write a then b')
    await waitForEvent(org, s.id, 'approval.requested', (d) => d.toolCallId === 'dup')
    assert.equal((await org.call('POST', `/v1/sessions/${s.id}/approvals/dup`, { approved: true })).statusCode, 200)
    const second = await waitForEvent(org, s.id, 'approval.requested', (d) => d.toolCallId !== 'dup')
    assert.equal(fs.existsSync(path.join(dir, 'b.txt')), false, 'the repeated id asked again instead of reusing the first approval')
    assert.deepEqual(second.args, { path: 'b.txt', content: 'b\n' })
    assert.equal((await org.call('POST', `/v1/sessions/${s.id}/approvals/${second.toolCallId}`, { approved: true })).statusCode, 200)
    assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed')
    assert.equal(fs.readFileSync(path.join(dir, 'b.txt'), 'utf8'), 'b\n')
    // The model is handed back the id it is answered under.
    assert.ok(resultOf(org.fake.modelRequests[2]!, second.toolCallId as string))
  })

  it('read_only: writing tools are refused with denied_read_only without asking; reads run', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, { agent: { model: 'm1', approval_mode: 'read_only' }, environment: { files: [{ path: 'seed.txt', content: b64('seeded line\n') }] } })
    const dir = hostWorkspace(w(), s.id)
    org.fake.script(
      {
        toolCalls: [
          { id: 'call_b', name: 'bash', args: { command: 'echo x > ro-bash.txt' } },
          { id: 'call_w', name: 'write_file', args: { path: 'ro-write.txt', content: 'x' } },
          { id: 'call_r', name: 'read_file', args: { path: 'seed.txt' } },
        ],
      },
      { text: 'Read only, fine.' },
    )
    const turn = await send(org, s.id, 'try everything')
    assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed')
    assert.deepEqual(await details(org, s.id, 'approval.requested'), [], 'read_only never asks')
    const resolved = await details(org, s.id, 'approval.resolved')
    assert.deepEqual(resolved.map((d) => d.toolCallId), ['call_b', 'call_w'])
    const req = org.fake.modelRequests[1]!
    for (const [d, name] of [[resolved[0]!, 'bash'], [resolved[1]!, 'write_file']] as const) {
      const { reason, ...rest } = d
      assert.deepEqual(rest, { event: 'approval.resolved', toolCallId: d.toolCallId, approved: false, name, code: 'denied_read_only' })
      assert.equal(typeof reason, 'string')
      const r = resultOf(req, d.toolCallId as string)
      assert.equal(r.isError, true)
      assert.match(r.content, /^Not run:/)
      assert.ok(r.content.includes(reason as string), `the reason given to the agent is the one recorded: ${r.content} / ${reason}`)
    }
    const read = resultOf(req, 'call_r')
    assert.equal(read.isError, undefined)
    assert.match(read.content, /seeded line/)
    assert.equal(fs.existsSync(path.join(dir, 'ro-bash.txt')), false, 'bash did not run')
    assert.equal(fs.existsSync(path.join(dir, 'ro-write.txt')), false, 'write_file did not run')
  })

  it('permission rules: deny by command and by path (deny beats a matching allow), other calls run', async (t) => {
    const org = await newOrg(w(), t)
    const s = await createSession(org, {
      agent: {
        model: 'm1',
        permission_rules: [
          { decision: 'allow', tool: 'bash' },
          { decision: 'deny', command: 'rm *' },
          { decision: 'deny', path: 'secrets/**' },
        ],
      },
      environment: { files: [{ path: 'x/keep.txt', content: b64('keep me\n') }] },
    })
    const dir = hostWorkspace(w(), s.id)
    org.fake.script(
      {
        toolCalls: [
          { id: 'call_rm', name: 'bash', args: { command: 'rm -rf x' } },
          { id: 'call_ls', name: 'bash', args: { command: 'ls' } },
          { id: 'call_sec', name: 'write_file', args: { path: 'secrets/a', content: 'top secret' } },
        ],
      },
      { text: 'ok' },
    )
    const turn = await send(org, s.id, 'clean up')
    assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed')
    assert.deepEqual(await details(org, s.id, 'approval.requested'), [])
    const resolved = await details(org, s.id, 'approval.resolved')
    assert.deepEqual(
      resolved.map(({ reason, ...d }) => (assert.equal(typeof reason, 'string'), d)),
      [
        { event: 'approval.resolved', toolCallId: 'call_rm', approved: false, name: 'bash', code: 'denied_by_rule' },
        { event: 'approval.resolved', toolCallId: 'call_sec', approved: false, name: 'write_file', code: 'denied_by_rule' },
      ],
    )
    const req = org.fake.modelRequests[1]!
    assert.match(resultOf(req, 'call_rm').content, /^Not run:/)
    assert.equal(resultOf(req, 'call_rm').isError, true)
    assert.match(resultOf(req, 'call_sec').content, /^Not run:/)
    const ls = resultOf(req, 'call_ls')
    assert.equal(ls.isError, undefined, ls.content)
    assert.match(ls.content, /^x$/m, 'ls ran and still sees x')
    assert.equal(fs.readFileSync(path.join(dir, 'x/keep.txt'), 'utf8'), 'keep me\n', 'rm did not run')
    assert.equal(fs.existsSync(path.join(dir, 'secrets/a')), false)
  })

  it('permission rules: allow skips the ask of approval_mode ask; ask makes a read wait in auto mode', async (t) => {
    const org = await newOrg(w(), t)
    // ask mode, but bash is allowed by rule: it runs without asking.
    const a = await createSession(org, { agent: { model: 'm1', approval_mode: 'ask', permission_rules: [{ decision: 'allow', tool: 'bash' }] } })
    org.fake.script({ toolCalls: [{ id: 'call_ab', name: 'bash', args: { command: 'echo ran > by-bash.txt' } }] }, { text: 'ok' })
    const ta = await send(org, a.id, 'run it')
    assert.equal((await settledTurn(org, a.id, ta.id)).status, 'completed')
    assert.deepEqual(await details(org, a.id, 'approval.requested'), [])
    assert.deepEqual(await details(org, a.id, 'approval.resolved'), [])
    assert.equal(fs.readFileSync(path.join(hostWorkspace(w(), a.id), 'by-bash.txt'), 'utf8'), 'ran\n')

    // auto mode, but read_file is `ask` by rule: it waits for a person.
    const b = await createSession(org, { agent: { model: 'm1', permission_rules: [{ decision: 'ask', tool: 'read_file' }] }, environment: { files: [{ path: 'seed.txt', content: b64('seeded line\n') }] } })
    org.fake.script({ toolCalls: [{ id: 'call_ar', name: 'read_file', args: { path: 'seed.txt' } }] }, { text: 'ok' })
    const tb = await send(org, b.id, 'read it')
    const asked = await waitForEvent(org, b.id, 'approval.requested')
    const { sensitive, ...rest } = asked
    assert.deepEqual(rest, { event: 'approval.requested', toolCallId: 'call_ar', name: 'read_file', args: { path: 'seed.txt' } })
    assert.equal(typeof sensitive, 'boolean')
    await quiet(w(), b.id)
    assert.equal(org.fake.modelRequests.length, 3, 'the read waits: no model call after it yet')
    assert.equal((await getTurn(org, b.id, tb.id)).status, 'working')
    const ok = await org.call('POST', `/v1/sessions/${b.id}/approvals/call_ar`, { approved: true })
    assert.equal(ok.statusCode, 200, ok.body)
    assert.equal((await settledTurn(org, b.id, tb.id)).status, 'completed')
    assert.match(resultOf(org.fake.modelRequests[3]!, 'call_ar').content, /seeded line/)
  })

  describe('approval timeout', () => {
    const wt = useWarren(dialect, { env: { ...ACTIONS_ENV, WARREN_APPROVAL_TIMEOUT_MS: '300' } })

    it('an unanswered approval is refused with approval_timeout and the turn goes on', async (t) => {
      const org = await newOrg(wt(), t)
      const s = await createSession(org, { agent: { model: 'm1', approval_mode: 'ask' } })
      org.fake.script({ toolCalls: [{ id: 'call_t', name: 'bash', args: { command: 'echo t > late.txt' } }] }, { text: 'Nobody answered; moving on.' })
      const turn = await send(org, s.id, 'run it')
      assert.equal((await settledTurn(org, s.id, turn.id)).status, 'completed', 'the turn completes after the timeout')
      assert.deepEqual((await details(org, s.id, 'approval.requested')).map((d) => d.toolCallId), ['call_t'])
      const resolved = await details(org, s.id, 'approval.resolved')
      assert.equal(resolved.length, 1)
      const { reason, ...rest } = resolved[0]!
      assert.deepEqual(rest, { event: 'approval.resolved', toolCallId: 'call_t', approved: false, name: 'bash', code: 'approval_timeout' })
      assert.equal(typeof reason, 'string')
      const r = resultOf(org.fake.modelRequests[1]!, 'call_t')
      assert.equal(r.isError, true)
      assert.match(r.content, /^Not run:/)
      assert.equal(fs.existsSync(path.join(hostWorkspace(wt(), s.id), 'late.txt')), false)
      expectError(await org.call('POST', `/v1/sessions/${s.id}/approvals/call_t`, { approved: true }), 409, 'conflict')
      // approval.resolved carries "the reason given to the agent" (spec, event vocabulary), as it does for the other refusals.
      assert.ok(r.content.includes(reason as string), `the reason recorded is the one the model got: recorded ${JSON.stringify(reason)}, model got ${JSON.stringify(r.content)}`)
    })
  })

  it('every event the suite recorded has the payload its schema gives its name', async () => {
    const seen = await expectLogMatchesSchemas(w())
    for (const name of ['approval.requested', 'approval.resolved', 'agent.tool_result', 'file.changed']) assert.ok(seen.has(name), `the suite recorded no ${name}`)
  })
})
