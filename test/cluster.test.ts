// Many nodes, one service (issue 15): real `warren serve` child processes on one PostgreSQL
// schema, each with its own data folder and sandbox share of the host (test/cluster.ts). A node
// that starts beside a live one must leave that node's turns and workspaces to it: its start-up
// recovery may touch only sessions whose lease has lapsed. On SQLite there is one process per data
// folder, and a second one is refused.
import { removeDataDir } from './left-on-host.ts'
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { NODE_LEASE_MS, startCluster, type Cluster } from './cluster.ts'
import { startModelServer, type FakeModelServer, type ModelRequest, type ScriptStep } from './fakes/model-server.ts'
import { allItems, allowUpTo, connectModel, createSession, render, route, send, sessionWithMarker, settled, tag, type Turn } from './cluster.helpers.ts'
import { waitFor } from './fixtures.ts'
import { onPostgres } from './harness.ts'
import { serviceProcess } from './service-process.ts'

/** The session's open usage intervals that no one has marked for review (its workspace's time still counted). */
const openIntervals = (cluster: Cluster, sessionId: string) =>
  cluster.query<{ id: string }>('SELECT id FROM {schema}.usage_intervals WHERE session_id = $1 AND ended_at IS NULL AND needs_review = 0', [sessionId])

onPostgres('cluster: two nodes on one PostgreSQL', () => {
  let fake: FakeModelServer
  const clusters: Cluster[] = []
  const cluster = async (start: number[]) => {
    const c = await startCluster({ nodes: 2, start })
    clusters.push(c)
    return c
  }
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(async () => {
    await Promise.allSettled(clusters.map((c) => c.close()))
    await fake?.close()
  })

  it('a node started while another drives a turn leaves the turn to it: the model is asked once per step', async () => {
    const c = await cluster([0])
    await connectModel(c, 0, fake)
    const text = `run one command ${tag()}`
    const steps = { first: 0, second: 0 }
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    route(fake, text, async (req) => {
      if (req.toolResults.length === 0) {
        steps.first++
        // The first step stays in flight until node B has started: B's start-up sees the turn working.
        await gate
        return { toolCalls: [{ name: 'bash', args: { command: 'echo one-call' } }] }
      }
      steps.second++
      return { text: 'done after one call' }
    })
    const sessionId = await createSession(c, 0)
    const turn = await send(c, 0, sessionId, text)
    await waitFor('node A asks the model for the first step', async () => steps.first >= 1, 60_000)

    await c.start(1)
    // Node B's start-up is where today's recovery drives the same turn again: give a wrong
    // implementation the chance to show it before the first step is answered.
    await allowUpTo(8_000, () => steps.first >= 2)
    release()

    const done = await settled(c, sessionId, turn.id)
    const items = await allItems(c, sessionId)
    assert.deepEqual(steps, { first: 1, second: 1 }, `the model must be asked exactly once per step (turn ${done.status}, error ${JSON.stringify(done.error)})\n${render(items)}`)
    assert.equal(done.status, 'completed', JSON.stringify(done))
    const calls = items.filter((i) => i.detail.event === 'agent.tool_call')
    const results = items.filter((i) => i.detail.event === 'agent.tool_result')
    assert.equal(calls.length, 1, `one tool call\n${render(items)}`)
    assert.equal(results.length, 1, `one tool result\n${render(items)}`)
    assert.equal(items.filter((i) => i.detail.event === 'turn.started').length, 1, render(items))
    assert.equal(items.filter((i) => i.detail.event === 'agent.message').length, 1, render(items))
    const turns = await c.api('GET', `/v1/sessions/${sessionId}/turns?order=asc&limit=100`)
    assert.deepEqual(turns.body.data.map((t: Turn) => t.id), [turn.id])
  })

  it("a node started beside a live one leaves that node's workspace running and its usage interval open", async () => {
    const c = await cluster([0])
    await connectModel(c, 0, fake)
    const { sessionId, marker } = await sessionWithMarker(c, 0, fake)
    const state = async (node: number) => {
      const res = await c.on(node, 'GET', `/v1/sessions/${sessionId}`)
      assert.equal(res.status, 200, res.text)
      return res.body.environment.state as string
    }
    assert.equal(await state(0), 'running', 'control: the workspace runs on node A')
    const open = await openIntervals(c, sessionId)
    assert.equal(open.length, 1, 'control: node A counts the running workspace in one open interval')

    await c.start(1)
    // Past two leases: a wrong takeover of a live node (not only one at start-up) has had its chance.
    await sleep(2 * NODE_LEASE_MS)
    for (const node of [0, 1]) assert.ok(['running', 'paused'].includes(await state(node)), `node ${node} sees the workspace ${await state(node)}, not running or paused`)
    assert.deepEqual(await openIntervals(c, sessionId), open, "node A's usage interval is still open and not marked for review")
    const usage = await c.api('GET', `/v1/sessions/${sessionId}/usage`)
    assert.equal(usage.status, 200, usage.text)
    assert.equal(usage.body.needs_review_intervals, 0, usage.text)

    // A message that lands on node B is served by the same workspace: what node A wrote is there.
    const read = `read the marker back ${marker}`
    let seen: string | null = null
    // The conversation already holds the first turn's one tool result: this turn's is the second.
    route(fake, read, (req) => {
      if (req.toolResults.length <= 1) return { toolCalls: [{ name: 'bash', args: { command: 'cat /workspace/kept.txt' } }] }
      seen = req.toolResults.at(-1)!.content
      return { text: 'read' }
    })
    const second = await settled(c, sessionId, (await send(c, 1, sessionId, read)).id)
    assert.equal(second.status, 'completed', JSON.stringify(second))
    assert.ok(seen !== null && (seen as string).includes(marker), `the second turn read ${JSON.stringify(seen)}, not the marker node A's workspace holds`)
  })
})

onPostgres('cluster: a node killed', () => {
  let fake: FakeModelServer
  let c: Cluster | undefined
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(async () => {
    await c?.close()
    await fake?.close()
  })

  it('SIGKILLed mid model stream: another node takes the session within the lease, restores the workspace from its last snapshot and carries the turn on', async () => {
    c = await startCluster({ nodes: 2, start: [0, 1] })
    await connectModel(c, 0, fake)
    const { sessionId, marker } = await sessionWithMarker(c, 0, fake)
    // The settled turn's files are saved where every node reaches them.
    await waitFor('the workspace snapshot after the first turn', async () => (await c!.query('SELECT session_id FROM {schema}.workspace_snapshots WHERE session_id = $1', [sessionId])).length === 1, 60_000)
    const [owner] = await c.query<{ owner_node: string }>('SELECT owner_node FROM {schema}.sessions WHERE id = $1', [sessionId])

    const read = `read the marker back ${marker}`
    const asked = { streams: 0, afterTool: 0 }
    let seen: string | null = null
    const answerRead = (req: ModelRequest): ScriptStep => {
      if (req.toolResults.length <= 1) {
        // The first ask streams forever: its node dies under it. The next ask is the other node's.
        if (asked.streams++ === 0) return { hang: true, text: 'thinking' }
        return { toolCalls: [{ name: 'bash', args: { command: 'cat /workspace/kept.txt' } }] }
      }
      asked.afterTool++
      seen = req.toolResults.at(-1)!.content
      return { text: 'read' }
    }
    route(fake, read, answerRead)
    // The node that takes over tells the model, as the turn's latest user text, what was restored.
    const previous = fake.fallback
    fake.fallback = (req) => (req.lastUserText?.startsWith('[Warren] The node that ran this workspace stopped') ? answerRead(req) : typeof previous === 'function' ? previous(req) : { error: { status: 500 } })
    const turn = await send(c, 0, sessionId, read)
    await waitFor('node A streams the first step', async () => asked.streams >= 1, 60_000)
    await c.kill(0, 'SIGKILL')

    const done = await settled(c, sessionId, turn.id)
    assert.equal(done.status, 'completed', JSON.stringify(done))
    assert.deepEqual(asked, { streams: 2, afterTool: 1 }, 'the cut stream is asked again once, by the node that took over; no step twice after that')
    assert.ok(seen !== null && (seen as string).includes(marker), `the restored workspace holds what the first turn wrote: read ${JSON.stringify(seen)}`)
    const [now] = await c.query<{ owner_node: string }>('SELECT owner_node FROM {schema}.sessions WHERE id = $1', [sessionId])
    assert.notEqual(now!.owner_node, owner!.owner_node, 'another node holds the session')
    const items = await allItems(c, sessionId)
    const restored = items.filter((i) => i.detail.event === 'agent.error' && String(i.detail.message).includes('restored to its state at'))
    assert.equal(restored.length, 1, `the session says its workspace was restored from a snapshot\n${render(items)}`)
    assert.equal(items.filter((i) => i.detail.event === 'agent.message' && i.turn_id === turn.id).length, 1, render(items))
  })

  it('SIGKILLed while a turn is parked on a caller function: the call is answered through another node, which carries the turn on, one model call a step', async () => {
    const k = await startCluster({ nodes: 2, start: [0, 1] })
    try {
      await connectModel(k, 0, fake)
      const text = `look up an order ${tag()}`
      const asked = { first: 0, second: 0 }
      route(fake, text, (req) => {
        if (req.toolResults.length === 0) {
          asked.first++
          return { toolCalls: [{ id: 'call_o1', name: 'lookup_order', args: { id: 'A-1' } }] }
        }
        asked.second++
        return { text: `the order: ${req.toolResults[0]!.content}` }
      })
      const created = await k.on(0, 'POST', '/v1/sessions', { tools: [{ type: 'function', name: 'lookup_order', description: 'Look up an order.', parameters: { type: 'object', properties: { id: { type: 'string' } } } }] })
      assert.equal(created.status, 201, created.text)
      const sessionId = created.body.id as string
      const turn = await send(k, 0, sessionId, text)
      await waitFor('the turn waits on the function', async () => (await k.on(0, 'GET', `/v1/sessions/${sessionId}`)).body.status === 'requires_action', 60_000)
      await k.kill(0, 'SIGKILL')

      const answered = await k.on(1, 'POST', `/v1/sessions/${sessionId}/required_actions/call_o1`, { output: { status: 'shipped' } })
      assert.equal(answered.status, 200, answered.text)
      const done = await settled(k, sessionId, turn.id)
      assert.equal(done.status, 'completed', JSON.stringify(done))
      assert.deepEqual(asked, { first: 1, second: 1 }, 'one model call a step, across the kill')
      const items = await allItems(k, sessionId)
      assert.equal(items.filter((i) => i.detail.event === 'tool.resolved').length, 1, render(items))
      assert.match(String(items.filter((i) => i.detail.event === 'agent.message').at(-1)?.detail.text), /shipped/)
    } finally {
      await k.close()
    }
  })
})

describe('a second warren serve on one SQLite data folder [sqlite, child processes]', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-sqlite-twice-'))
  const suffix = Array.from(randomBytes(4), (b) => 'abcdefghijklmnopqrstuvwxyz'[b % 26]).join('')
  const env = (prefix: string) => ({ WARREN_DATA_DIR: dataDir, WARREN_SANDBOX_PREFIX: prefix, WARREN_LOG_LEVEL: 'warn' })
  const first = serviceProcess(env(`f${suffix}`))
  const second = serviceProcess({ ...env(`s${suffix}`), WARREN_SANDBOX_SUBNET: '10.241.0.0/16', WARREN_SANDBOX_UID_BASE: '260000' })
  after(async () => {
    for (const s of [second, first]) if (s.running) await s.stop('SIGTERM').catch(() => s.stop('SIGKILL').catch(() => {}))
    removeDataDir(dataDir)
  })

  it('is refused at start with a message naming the folder and the process that holds it', async () => {
    first.token = await first.mint('sqlite-twice')
    await first.start()
    const pid = first.pid
    assert.ok(pid !== undefined)
    let refusal: Error | null = null
    try {
      await second.start()
    } catch (err) {
      refusal = err as Error
    }
    assert.ok(refusal, `the second warren serve listens at ${second.running ? second.url : '?'} on the data folder the first one uses`)
    const code = /exited \(code (\d+|null), signal (\w+)\)/.exec(refusal.message)
    assert.ok(code && code[1] !== '0' && code[1] !== 'null', `it must exit with a non-zero code: ${refusal.message}`)
    const stderr = second.log.filter((l) => l.startsWith('stderr: ')).join('\n')
    assert.ok(stderr.includes(dataDir), `stderr names the data folder ${dataDir}:\n${stderr}`)
    assert.ok(new RegExp(`\\b${pid}\\b`).test(stderr), `stderr names the running process (pid ${pid}):\n${stderr}`)
    // The first one goes on serving, and the CLI still writes to its store meanwhile.
    const token = await first.mint('sqlite-twice-after')
    const health = await first.api('GET', '/v1/health', undefined, token)
    assert.equal(health.status, 200, health.text)
  })
})
