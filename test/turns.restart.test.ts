// Turns across a real crash of the service: `warren serve` runs as a child process, is killed
// with SIGKILL in the middle of a turn and started again on the same data folder. The restarted
// process must carry the same turn on (no new turn), lose and repeat no persisted event, and keep
// what waits on a person or the caller waiting.
//
// SQLite only: the child opens the store itself from WARREN_DATA_DIR, the way a deployment
// starts. The PostgreSQL side of a restart on the same store is covered in-process by
// test/workspaces.restart.test.ts (forEachDialect); what is tested here is the process dying.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { startModelServer, type FakeModelServer, type ModelRequest } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { serviceProcess, type Exit } from './service-process.ts'

type Item = { object: 'item'; id: string; type: string; turn_id: string | null; created_at: number; detail: { event: string; [k: string]: unknown } }
type Turn = { object: 'turn'; id: string; session_id: string; status: string; created_at: number; started_at: number | null; completed_at: number | null; error: unknown }

/** 'k' and four lowercase letters or digits: this file run's sandboxes, the same on every restart. */
const sandboxPrefix = 'k' + Array.from(randomBytes(4), (b) => 'abcdefghijklmnopqrstuvwxyz0123456789'[b % 36]).join('')
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-turns-restart-'))
const service = serviceProcess({
  WARREN_DATA_DIR: dataDir,
  WARREN_SANDBOX_PREFIX: sandboxPrefix,
  WARREN_PROVIDER_RETRY_DELAYS_MS: '50,50',
  WARREN_LOG_LEVEL: 'warn',
  // The test polls the child over HTTP; the default of 120 requests a minute would refuse it.
  WARREN_RATE_GENERAL_PER_MIN: '100000',
})

/** A SIGKILL left sandboxes behind that no started service has cleaned yet. */
let orphansLeft = false
let fake: FakeModelServer

async function startChild(): Promise<void> {
  await service.start()
  // Its start-up removed what the killed process left (same prefix).
  orphansLeft = false
}

async function stopChild(signal: NodeJS.Signals): Promise<Exit> {
  try {
    const ended = await service.stop(signal)
    if (signal === 'SIGKILL') orphansLeft = true
    return ended
  } catch (err) {
    orphansLeft = true
    throw err
  }
}

/** The crash: SIGKILL, nothing gets to run in the service. */
async function crash(): Promise<void> {
  const how = await stopChild('SIGKILL')
  assert.equal(how.signal, 'SIGKILL', `the child ended otherwise: ${JSON.stringify(how)}`)
}

const ensureChild = async () => service.running || (await startChild())
const api = (method: string, url: string, body?: unknown) => service.api(method, url, body)

/** Every item of the session, oldest first, walking the pages. */
async function allItems(sessionId: string): Promise<Item[]> {
  const out: Item[] = []
  let cursor = ''
  for (;;) {
    const res = await api('GET', `/v1/sessions/${sessionId}/items?order=asc&limit=100${cursor ? `&after=${cursor}` : ''}`)
    assert.equal(res.status, 200, res.text)
    out.push(...(res.body.data as Item[]))
    if (!res.body.has_more) return out
    cursor = res.body.last_id
  }
}

const ofEvent = (list: Item[], event: string) => list.filter((i) => i.detail.event === event)
const itemsWith = async (sessionId: string, what: string, pick: (list: Item[]) => boolean) =>
  waitFor(what, async () => {
    const list = await allItems(sessionId)
    return pick(list) && list
  })

async function getTurns(sessionId: string): Promise<Turn[]> {
  const res = await api('GET', `/v1/sessions/${sessionId}/turns?order=asc&limit=100`)
  assert.equal(res.status, 200, res.text)
  return res.body.data
}

async function settledTurn(sessionId: string, turnId: string): Promise<Turn> {
  return waitFor(`turn ${turnId} settles`, async () => {
    const res = await api('GET', `/v1/sessions/${sessionId}/turns/${turnId}`)
    assert.equal(res.status, 200, res.text)
    // Settled, and its files' publication ended: the last move a turn makes.
    return res.body.status !== 'working' && res.body.artifacts !== 'pending' && (res.body as Turn)
  })
}

async function createSession(body: Record<string, unknown>): Promise<string> {
  const res = await api('POST', '/v1/sessions', body)
  assert.equal(res.status, 201, res.text)
  return res.body.id
}

async function send(sessionId: string, text: string): Promise<Turn> {
  const res = await api('POST', `/v1/sessions/${sessionId}/messages`, { text })
  assert.equal(res.status, 202, res.text)
  return res.body
}

const count = (list: Item[], event: string, key: string, value: unknown) => ofEvent(list, event).filter((i) => i.detail[key] === value).length

/** No event repeated: one start, at most one end per turn; one record per tool call of each kind. */
function assertNoDuplicates(list: Item[], label: string): void {
  const dupes = (event: string, keyOf: (i: Item) => unknown) => {
    const seen = new Map<unknown, number>()
    for (const i of ofEvent(list, event)) seen.set(keyOf(i), (seen.get(keyOf(i)) ?? 0) + 1)
    const repeated = [...seen].filter(([, n]) => n > 1)
    assert.deepEqual(repeated, [], `${label}: ${event} repeated for ${JSON.stringify(repeated)}\n${render(list)}`)
  }
  dupes('turn.started', (i) => i.detail.turnId)
  dupes('turn.ended', (i) => i.detail.turnId)
  // The same input recorded twice in one turn (a steer adds a different text to its turn).
  dupes('user.message', (i) => `${i.turn_id} ${String(i.detail.text)}`)
  for (const event of ['agent.tool_call', 'agent.tool_result', 'approval.requested', 'approval.resolved', 'tool.required', 'tool.resolved']) dupes(event, (i) => i.detail.toolCallId)
  const seqs = list.map((i) => Number(/^itm_(\d+)$/.exec(i.id)?.[1] ?? NaN))
  for (let k = 1; k < seqs.length; k++) assert.ok(seqs[k]! > seqs[k - 1]!, `${label}: item ids not strictly increasing at ${list[k]!.id}\n${render(list)}`)
}

/** What was persisted before the crash is still there, unchanged and first; nothing is repeated. */
function assertContinues(before: Item[], afterward: Item[]): void {
  const byId = new Map(afterward.map((i) => [i.id, i]))
  for (const b of before) assert.deepEqual(byId.get(b.id), b, `item ${b.id} (${b.detail.event}) was lost or changed across the restart\n${render(afterward)}`)
  assert.deepEqual(afterward.slice(0, before.length), before, `the items read before the crash are no longer the first ones\n${render(afterward)}`)
  assertNoDuplicates(afterward, 'after the restart')
}

/** Every turn that started ended exactly once. */
function assertEveryTurnEndedOnce(list: Item[]): void {
  for (const s of ofEvent(list, 'turn.started')) assert.equal(count(list, 'turn.ended', 'turnId', s.detail.turnId), 1, `turn ${s.detail.turnId} must end exactly once\n${render(list)}`)
}

/** Host processes whose command line contains `marker` (the sandboxes' processes are visible from the host). */
function processesWith(marker: string): number[] {
  const pids: number[] = []
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue
    try {
      if (fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(marker)) pids.push(Number(entry))
    } catch {
      // gone meanwhile
    }
  }
  return pids
}

const render = (list: Item[]) => list.map((i) => `  ${i.id} ${i.turn_id ?? '-'} ${JSON.stringify(i.detail)}`).join('\n')
const mentions = (m: unknown, text: string) => JSON.stringify(m).includes(text)

describe('turns across a SIGKILL of the service [sqlite, child process]', () => {
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    service.token = await service.mint('restart-test')
    await startChild()
    const mc = await api('POST', '/v1/model-credentials', { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] })
    assert.equal(mc.status, 201, mc.text)
  })

  after(async () => {
    try {
      if (service.running) await stopChild('SIGTERM').catch(() => {})
      // A test that failed after a SIGKILL leaves sandboxes: a service on the same prefix removes them at start.
      if (orphansLeft) {
        await startChild()
        await stopChild('SIGTERM').catch(() => {})
      }
    } finally {
      if (service.running) await service.stop('SIGKILL').catch(() => {})
      await fake?.close()
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  })

  it('killed during a model stream: the same turn asks the model again, completes, and says it once', async () => {
    await ensureChild()
    assert.equal(fake.unconsumed, 0)
    const id = await createSession({})
    const requestsBefore = fake.modelRequests.length
    fake.script({ hang: true, text: 'partial' })
    const turn = await send(id, 'write me a poem')
    await fake.waitForModelRequests(requestsBefore + 1)
    const turnsBefore = await getTurns(id)
    const before = await allItems(id)
    assertNoDuplicates(before, 'before the crash')
    assert.equal(count(before, 'turn.started', 'turnId', turn.id), 1, render(before))
    assert.equal(ofEvent(before, 'turn.ended').length, 0, render(before))

    await crash()
    fake.script({ text: 'finished after restart' })
    await startChild()

    const settled = await settledTurn(id, turn.id)
    assert.equal(settled.status, 'completed', JSON.stringify(settled))
    assert.equal(settled.error, null)
    assert.equal(settled.started_at, turnsBefore[0]!.started_at, 'the turn did not start again')
    const turnsAfter = await getTurns(id)
    assert.deepEqual(turnsAfter.map((t) => t.id), [turn.id], 'no new turn: the killed one went on')

    const afterward = await allItems(id)
    assertContinues(before, afterward)
    assertEveryTurnEndedOnce(afterward)
    assert.deepEqual(ofEvent(afterward, 'agent.message').map((i) => i.detail.text), ['finished after restart'], `the cut stream leaves no message, the new one is said once\n${render(afterward)}`)
    assert.equal(ofEvent(afterward, 'user.message').length, 1, render(afterward))

    const requests = fake.modelRequests.slice(requestsBefore)
    assert.equal(requests.length, 2, 'the cut request, then one after the restart')
    const again = requests[1]!
    assert.equal(again.lastUserText, 'write me a poem')
    assert.equal(again.messages.filter((m) => mentions(m, 'write me a poem')).length, 1, `the input is in the conversation once: ${JSON.stringify(again.messages)}`)
    assert.ok(!again.messages.some((m) => (m as { role?: string }).role === 'assistant'), `nothing of the cut stream entered the conversation: ${JSON.stringify(again.messages)}`)
    const session = await api('GET', `/v1/sessions/${id}`)
    assert.equal(session.body.status, 'idle', session.text)
  })

  it('killed while a tool runs: the call gets one error result saying the restart cut it, and the turn goes on', async () => {
    await ensureChild()
    assert.equal(fake.unconsumed, 0)
    const id = await createSession({})
    const requestsBefore = fake.modelRequests.length
    // The touch tells the test from outside that the command is running (the runner marks the
    // call as running before it starts it); the sleep keeps it running until the crash.
    const marker = `started-${sandboxPrefix}.txt`
    const command = `touch /workspace/${marker}; sleep 30; echo done > /workspace/after.txt`
    fake.script({ toolCalls: [{ id: 'call_sleepy', name: 'bash', args: { command } }] }, { text: 'ok' })
    const turn = await send(id, 'run the slow thing')
    await itemsWith(id, 'agent.tool_call', (l) => count(l, 'agent.tool_call', 'toolCallId', 'call_sleepy') === 1)
    await waitFor('the command runs in the sandbox', async () => fs.existsSync(path.join(dataDir, 'workspaces', id, marker)))
    assert.notDeepEqual(processesWith(marker), [], 'control: the command is seen running on the host')
    const before = await allItems(id)
    assertNoDuplicates(before, 'before the crash')
    assert.equal(ofEvent(before, 'agent.tool_result').length, 0, render(before))

    await crash()
    await startChild()
    // The new process removed the killed one's sandbox: its command does not run on unseen.
    await waitFor('the interrupted command is gone', async () => processesWith(marker).length === 0, 10_000)

    const settled = await settledTurn(id, turn.id)
    assert.equal(settled.status, 'completed', JSON.stringify(settled))
    assert.deepEqual((await getTurns(id)).map((t) => t.id), [turn.id], 'no new turn: the killed one went on')

    const afterward = await allItems(id)
    assertContinues(before, afterward)
    assertEveryTurnEndedOnce(afterward)
    const results = ofEvent(afterward, 'agent.tool_result').filter((i) => i.detail.toolCallId === 'call_sleepy')
    assert.equal(results.length, 1, `exactly one result for the cut call\n${render(afterward)}`)
    const r = results[0]!.detail
    assert.equal(r.toolName, 'bash')
    assert.equal(r.isError, true)
    assert.match(String(r.summary), /interrupt/i)
    assert.match(String(r.summary), /restart/i)
    assert.equal(count(afterward, 'agent.tool_call', 'toolCallId', 'call_sleepy'), 1)
    assert.deepEqual(ofEvent(afterward, 'agent.message').map((i) => i.detail.text), ['ok'], render(afterward))

    const requests = fake.modelRequests.slice(requestsBefore)
    assert.equal(requests.length, 2, 'one request before the crash, one with the tool result after it')
    const toolResults = requests[1]!.toolResults.filter((t) => t.toolCallId === 'call_sleepy')
    assert.equal(toolResults.length, 1, JSON.stringify(requests[1]!.toolResults))
    assert.match(toolResults[0]!.content, /restart/i, 'the model is told the restart cut its call')
    assert.equal(requests[1]!.messages.filter((m) => mentions(m, 'run the slow thing')).length, 1, 'the input is in the conversation once')
  })

  it('killed while parked on a caller function and on an approval: both still wait after the restart, and their answers carry the turns on', async () => {
    await ensureChild()
    assert.equal(fake.unconsumed, 0)
    const requestsBefore = fake.modelRequests.length

    // A: parked on the caller's function.
    const a = await createSession({ tools: [{ type: 'function', name: 'approve_refund', description: 'Approve a refund' }] })
    fake.script({ toolCalls: [{ id: 'call_refund', name: 'approve_refund', args: { order: 'o-17', amount: 12 } }] })
    const turnA = await send(a, 'refund order o-17')
    const parkedA = await waitFor('session A requires action', async () => {
      const s = await api('GET', `/v1/sessions/${a}`)
      return s.body.status === 'requires_action' && s.body
    })
    assert.equal(parkedA.required_actions.length, 1, JSON.stringify(parkedA))
    assert.equal(parkedA.required_actions[0].call_id, 'call_refund')

    // B: parked on a person's approval of a bash call.
    const b = await createSession({ agent: { approval_mode: 'ask' } })
    fake.script({ toolCalls: [{ id: 'call_approved_bash', name: 'bash', args: { command: 'echo approved > /workspace/approved.txt; cat /workspace/approved.txt' } }] })
    const turnB = await send(b, 'write the approved file')
    await itemsWith(b, 'approval.requested', (l) => count(l, 'approval.requested', 'toolCallId', 'call_approved_bash') === 1)
    await fake.waitForModelRequests(requestsBefore + 2)

    const beforeA = await allItems(a)
    const beforeB = await allItems(b)
    assertNoDuplicates(beforeA, 'A before the crash')
    assertNoDuplicates(beforeB, 'B before the crash')
    assert.equal(count(beforeA, 'tool.required', 'toolCallId', 'call_refund'), 1, render(beforeA))

    await crash()
    await startChild()

    // A: the required action is still there, the same one.
    const stillA = await api('GET', `/v1/sessions/${a}`)
    assert.equal(stillA.status, 200, stillA.text)
    assert.equal(stillA.body.status, 'requires_action', stillA.text)
    assert.deepEqual(stillA.body.required_actions, parkedA.required_actions, 'the same required action after the restart')
    const listed = await api('GET', '/v1/sessions?limit=100')
    assert.deepEqual(listed.body.data.find((s: { id: string }) => s.id === a)?.required_actions, parkedA.required_actions, 'the session list shows it too')

    fake.script({ text: 'refund approved' })
    const answered = await api('POST', `/v1/sessions/${a}/required_actions/call_refund`, { output: { ok: true } })
    assert.equal(answered.status, 200, answered.text)
    assert.equal(answered.body.object, 'session')
    assert.deepEqual(answered.body.required_actions, [])
    const settledA = await settledTurn(a, turnA.id)
    assert.equal(settledA.status, 'completed', JSON.stringify(settledA))
    assert.deepEqual((await getTurns(a)).map((t) => t.id), [turnA.id])
    const afterA = await allItems(a)
    assertContinues(beforeA, afterA)
    assertEveryTurnEndedOnce(afterA)
    assert.equal(count(afterA, 'tool.resolved', 'toolCallId', 'call_refund'), 1, render(afterA))
    assert.equal(ofEvent(afterA, 'tool.resolved')[0]!.detail.success, true)
    assert.deepEqual(ofEvent(afterA, 'agent.message').map((i) => i.detail.text), ['refund approved'], render(afterA))
    const requestA = fake.modelRequests.slice(requestsBefore + 2).find((r: ModelRequest) => r.toolResults.some((t) => t.toolCallId === 'call_refund'))
    assert.ok(requestA, 'the model is asked again with the function output')
    assert.deepEqual(requestA.toolResults.filter((t) => t.toolCallId === 'call_refund').map((t) => JSON.parse(t.content)), [{ ok: true }])
    assert.equal((await api('GET', `/v1/sessions/${a}`)).body.status, 'idle')

    // B: the approval is still open; granting it runs the call in the restored workspace.
    fake.script({ text: 'the file is written' })
    const granted = await api('POST', `/v1/sessions/${b}/approvals/call_approved_bash`, { approved: true })
    assert.equal(granted.status, 200, granted.text)
    assert.equal(granted.body.object, 'approval')
    assert.equal(granted.body.approved, true)
    assert.equal(granted.body.turn_id, turnB.id)
    const settledB = await settledTurn(b, turnB.id)
    assert.equal(settledB.status, 'completed', JSON.stringify(settledB))
    assert.deepEqual((await getTurns(b)).map((t) => t.id), [turnB.id])
    const afterB = await allItems(b)
    assertContinues(beforeB, afterB)
    assertEveryTurnEndedOnce(afterB)
    assert.equal(count(afterB, 'approval.resolved', 'toolCallId', 'call_approved_bash'), 1, render(afterB))
    const resultB = ofEvent(afterB, 'agent.tool_result').filter((i) => i.detail.toolCallId === 'call_approved_bash')
    assert.equal(resultB.length, 1, render(afterB))
    assert.equal(resultB[0]!.detail.isError, false, render(afterB))
    const requestB = fake.modelRequests.slice(requestsBefore + 2).find((r: ModelRequest) => r.toolResults.some((t) => t.toolCallId === 'call_approved_bash'))
    assert.ok(requestB, 'the model is asked again with the command output')
    assert.match(requestB.toolResults.find((t) => t.toolCallId === 'call_approved_bash')!.content, /approved/)
    assert.equal(fs.readFileSync(path.join(dataDir, 'workspaces', b, 'approved.txt'), 'utf8'), 'approved\n')

    // Nothing asked the model on its own while the turns were parked across the restart.
    assert.equal(fake.modelRequests.length - requestsBefore, 4, 'two calls before the crash, one per answer after it')
    assert.equal(fake.unconsumed, 0)
  })
})
