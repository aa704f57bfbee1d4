// The interface's rules across three nodes (issue 15, item 6): ONE cluster of three `warren serve`
// child processes on one PostgreSQL schema (test/cluster.ts) serves every test of this file, and
// each request goes to the next node round-robin, or to a node the test names when what matters is
// that it is not the session's owner (the node that created it). Each test checks a rule the
// single-node suites check, in a way that a node answering only from its own memory would break.
import { after, afterEach, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { startCluster, type Cluster } from './cluster.ts'
import { startModelServer, type FakeModelServer, type ModelRequest, type ScriptStep } from './fakes/model-server.ts'
import { makeTestCert } from './fakes/test-cert.ts'
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.ts'
import { waitFor } from './fixtures.ts'
import { onPostgres } from './harness.ts'
import { hostRequest, openWebSocket, startSiteCommand } from './previews.helpers.ts'
import { openSse, type Frame } from './sse-client.ts'

type Detail = { event: string; [k: string]: unknown }
type Item = { id: string; type: string; turn_id: string | null; detail: Detail }
type Turn = { id: string; status: string; started_at: number | null; artifacts: string | null; error: unknown }
type Raw = { status: number; headers: Headers; bytes: Buffer; text: string; body: any; node: number }

/** The per-organization session ceiling the nodes run with: small, so that the limits test reaches it cheaply. */
const MAX_SESSIONS = 8
const NODES = 3

const tag = () => randomBytes(4).toString('hex')
const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex')
const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64')
const seqOf = (itemId: string): number => Number(/(\d+)$/.exec(itemId)![1])
/** Whether a process whose command line holds `mark` runs on this host (a workspace's included). */
const runs = (mark: string) => spawnSync('pgrep', ['-f', mark]).status === 0

onPostgres('cluster: the rules of the interface across three nodes', () => {
  const cert = makeTestCert()
  let receiver: WebhookReceiver
  let fake: FakeModelServer
  let c: Cluster
  /** A token of another organization: it must see nothing of the cluster's organization on any node. */
  let outsider: string
  /** Node index by node id (a session's owner_node). */
  const indexOf = new Map<string, number>()
  /** Sessions of the cluster's organization a test made, deleted after it so the ceiling is never reached by accident. */
  let made: string[] = []
  /** The next node for `raw` (its own round-robin beside the cluster's). */
  let next = 0

  before(async () => {
    receiver = await startWebhookReceiver(cert)
    fake = await startModelServer({ models: ['m1'] })
    c = await startCluster({
      nodes: NODES,
      env: {
        NODE_EXTRA_CA_CERTS: cert.certPath,
        WARREN_ALLOW_PRIVATE_WEBHOOKS: '1',
        WARREN_WEBHOOK_RETRY_DELAYS_MS: '0,300,300,300,300,300',
        WARREN_MAX_SESSIONS_PER_ORG: String(MAX_SESSIONS),
        // A short idle pause: the wake test waits for one; every other request wakes a workspace.
        WARREN_IDLE_PAUSE_MS: '3000',
      },
    })
    for (let i = 0; i < NODES; i++) {
      const health = await c.on(i, 'GET', '/v1/health')
      assert.equal(health.status, 200, health.text)
      indexOf.set(health.body.node.id, i)
    }
    const mc = await c.api('POST', '/v1/model-credentials', { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] })
    assert.equal(mc.status, 201, mc.text)
    outsider = await c.nodes[0]!.service.mint(`outsider-${tag()}`)
  })
  afterEach(async () => {
    const ids = made
    made = []
    for (const id of ids) {
      const res = await c.api('DELETE', `/v1/sessions/${id}`)
      assert.ok([200, 404].includes(res.status), `node ${res.node}: ${res.text}`)
    }
  })
  after(async () => {
    await c?.close()
    await fake?.close()
    await receiver?.close()
    cert.remove()
  })

  /** One request with raw bytes and headers: to node `to`, or to the next node round-robin. */
  async function raw(method: string, url: string, opts: { to?: number; body?: unknown; headers?: Record<string, string>; token?: string } = {}): Promise<Raw> {
    const node = opts.to ?? c.live()[next++ % c.live().length]!
    const res = await fetch(c.nodes[node]!.service.url + url, {
      method,
      headers: { authorization: `Bearer ${opts.token ?? c.token}`, ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}), ...opts.headers },
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    })
    const bytes = Buffer.from(await res.arrayBuffer())
    const text = bytes.toString('utf8')
    let body: any = null
    try {
      body = text ? JSON.parse(text) : null
    } catch {
      body = null
    }
    return { status: res.status, headers: res.headers, bytes, text, body, node }
  }

  /** The same GET on every node: the answers, in node order. */
  async function onEach(url: string): Promise<{ status: number; body: any; text: string }[]> {
    return Promise.all(Array.from({ length: NODES }, (_, i) => c.on(i, 'GET', url)))
  }

  /** Creates a session on the next node round-robin; that node owns it. */
  async function session(body: Record<string, unknown> = {}): Promise<{ id: string; owner: number; others: [number, number] }> {
    const res = await c.api('POST', '/v1/sessions', body)
    assert.equal(res.status, 201, `node ${res.node}: ${res.text}`)
    made.push(res.body.id)
    const [row] = await c.query<{ owner_node: string }>('SELECT owner_node FROM {schema}.sessions WHERE id = $1', [res.body.id])
    assert.equal(indexOf.get(row!.owner_node), res.node, 'the node that creates a session owns it')
    return { id: res.body.id, owner: res.node, others: [(res.node + 1) % NODES, (res.node + 2) % NODES] }
  }

  /** Answers the model calls whose latest user text is `text`; the others go to the routes set before. */
  function route(text: string, answer: (req: ModelRequest) => ScriptStep | Promise<ScriptStep>): void {
    const previous = fake.fallback
    fake.fallback = (req) => (req.lastUserText === text ? answer(req) : typeof previous === 'function' ? previous(req) : { error: { status: 500, message: `no route for "${req.lastUserText}"` } })
  }

  /** Model steps in order for one message: the n-th call of the route gets steps[n] (the last repeats). */
  function script(text: string, ...steps: (ScriptStep | ((req: ModelRequest) => ScriptStep))[]): ModelRequest[] {
    const seen: ModelRequest[] = []
    route(text, (req) => {
      seen.push(req)
      const step = steps[Math.min(seen.length - 1, steps.length - 1)]!
      return typeof step === 'function' ? step(req) : step
    })
    return seen
  }

  async function send(sessionId: string, text: string, to?: number): Promise<Turn & { node: number }> {
    const res = to === undefined ? await c.api('POST', `/v1/sessions/${sessionId}/messages`, { text }) : { ...(await c.on(to, 'POST', `/v1/sessions/${sessionId}/messages`, { text })), node: to }
    assert.equal(res.status, 202, `node ${res.node}: ${res.text}`)
    return { ...res.body, node: res.node }
  }

  const settled = (sessionId: string, turnId: string): Promise<Turn> =>
    waitFor(
      `turn ${turnId} settles`,
      async () => {
        const res = await c.api('GET', `/v1/sessions/${sessionId}/turns/${turnId}`)
        assert.equal(res.status, 200, `node ${res.node}: ${res.text}`)
        return res.body.status !== 'working' && res.body.artifacts !== 'pending' && (res.body as Turn)
      },
      120_000,
    )

  async function items(sessionId: string, on?: number): Promise<Item[]> {
    const out: Item[] = []
    let cursor = ''
    for (;;) {
      const url = `/v1/sessions/${sessionId}/items?order=asc&limit=100${cursor ? `&after=${cursor}` : ''}`
      const res = on === undefined ? await c.api('GET', url) : await c.on(on, 'GET', url)
      assert.equal(res.status, 200, res.text)
      out.push(...(res.body.data as Item[]))
      if (!res.body.has_more) return out
      cursor = res.body.last_id
    }
  }

  const waitForEvent = (sessionId: string, event: string, where: (d: Detail) => boolean = () => true) =>
    waitFor(`${event} in session ${sessionId}`, async () => (await items(sessionId)).map((i) => i.detail).find((d) => d.event === event && where(d)), 60_000)

  /** The host folder of the session's workspace on node `i` (the local provider keeps it under the data folder). */
  const workspaceOn = (i: number, sessionId: string) => path.join(c.nodes[i]!.dataDir, 'workspaces', sessionId)

  it('sessions: created on one node, read, listed, updated and filtered the same on the others; deleted, gone everywhere and its workspace removed on its owner', async () => {
    const label = `rules-${tag()}`
    const s = await session({ title: 'first', metadata: { suite: label } })
    await waitForEvent(s.id, 'sandbox.created')
    assert.ok(fs.existsSync(workspaceOn(s.owner, s.id)), 'the workspace is on its owner')
    for (const o of s.others) assert.equal(fs.existsSync(workspaceOn(o, s.id)), false, `no workspace of the session on node ${o}`)

    const patched = await c.on(s.others[0], 'POST', `/v1/sessions/${s.id}`, { title: 'second', metadata: { suite: label, colour: 'green' } })
    assert.equal(patched.status, 200, patched.text)
    for (const [i, got] of (await onEach(`/v1/sessions/${s.id}`)).entries()) {
      assert.equal(got.status, 200, `node ${i}: ${got.text}`)
      assert.equal(got.body.title, 'second', `node ${i} reads the title patched on node ${s.others[0]}`)
      assert.deepEqual(got.body.metadata, { suite: label, colour: 'green' }, `node ${i}`)
    }
    const other = await session({ metadata: { suite: label, colour: 'blue' } })
    for (const [i, list] of (await onEach(`/v1/sessions?metadata=${encodeURIComponent(`colour:green`)}&metadata=${encodeURIComponent(`suite:${label}`)}&limit=100`)).entries()) {
      assert.equal(list.status, 200, list.text)
      assert.deepEqual(list.body.data.map((x: { id: string }) => x.id), [s.id], `node ${i} filters by metadata`)
    }
    for (const [i, list] of (await onEach(`/v1/sessions?metadata=${encodeURIComponent(`suite:${label}`)}&limit=100&order=asc`)).entries()) {
      assert.deepEqual(list.body.data.map((x: { id: string }) => x.id), [s.id, other.id], `node ${i} lists both, oldest first`)
    }

    const deleted = await c.on(s.others[1], 'DELETE', `/v1/sessions/${s.id}`)
    assert.equal(deleted.status, 200, deleted.text)
    assert.deepEqual(deleted.body, { object: 'session.deleted', id: s.id, deleted: true })
    for (const [i, got] of (await onEach(`/v1/sessions/${s.id}`)).entries()) assert.equal(got.status, 404, `node ${i}: ${got.text}`)
    for (const [i, list] of (await onEach(`/v1/sessions?metadata=${encodeURIComponent(`suite:${label}`)}&limit=100`)).entries()) {
      assert.deepEqual(list.body.data.map((x: { id: string }) => x.id), [other.id], `node ${i} no longer lists the deleted session`)
    }
    await waitFor(`the owner (node ${s.owner}) removes the deleted session's workspace`, async () => !fs.existsSync(workspaceOn(s.owner, s.id)), 30_000)
    const again = await c.on(s.others[0], 'DELETE', `/v1/sessions/${s.id}`)
    assert.equal(again.status, 404, again.text)
  })

  it('sessions: a working session deleted through a non-owner stops on its owner: its turn is cancelled, its command killed, its workspace removed, the model not asked again', async () => {
    const s = await session()
    const text = `tick until deleted ${tag()}`
    const mark = `tick-${tag()}`
    const asked = script(text, { toolCalls: [{ name: 'bash', args: { command: `while :; do echo ${mark} >> ticks; sleep 0.05; done` } }] }, { text: 'should never be asked' })
    const turn = await send(s.id, text)
    const dir = workspaceOn(s.owner, s.id)
    await waitFor('the command runs on the owner', async () => fs.existsSync(path.join(dir, 'ticks')), 60_000)
    assert.ok(runs(mark), 'control: the running command is seen from the host')
    const usage = await onEach(`/v1/sessions/${s.id}/usage`)
    for (const u of usage) assert.equal(u.status, 200, u.text)
    assert.deepEqual(usage.map((u) => u.body.object), ['session.usage', 'session.usage', 'session.usage'])

    const deleted = await c.on(s.others[0], 'DELETE', `/v1/sessions/${s.id}`)
    assert.equal(deleted.status, 200, deleted.text)
    const [row] = await c.query<{ status: string }>('SELECT status FROM {schema}.turns WHERE id = $1', [turn.id])
    assert.equal(row!.status, 'cancelled', 'the working turn is cancelled with the session')
    await waitFor(`the owner (node ${s.owner}) removes the workspace`, async () => !fs.existsSync(dir), 30_000)
    await waitFor('no command of the deleted session runs', async () => !runs(mark), 30_000)
    assert.equal(asked.length, 1, 'the model is not asked again for a deleted session')
    for (const [i, got] of (await onEach(`/v1/sessions/${s.id}/turns/${turn.id}`)).entries()) assert.equal(got.status, 404, `node ${i}`)
  })

  it('turns and queue: a message through a non-owner runs on the owner, a second one queues, both read the same everywhere; the running turn is cancelled through a non-owner', async () => {
    const s = await session()
    const first = `tick forever ${tag()}`
    const second = `then answer ${tag()}`
    script(first, { toolCalls: [{ name: 'bash', args: { command: 'while :; do echo x >> ticks; sleep 0.05; done' } }] }, { text: 'stopped' })
    const secondAsked = script(second, { text: 'second done' })
    const running = await send(s.id, first, s.others[0])
    const ticks = path.join(workspaceOn(s.owner, s.id), 'ticks')
    await waitFor(`the command runs in the workspace on the owner (node ${s.owner})`, async () => fs.existsSync(ticks), 60_000)

    const waiting = await send(s.id, second, s.others[1])
    assert.equal(waiting.status, 'working')
    assert.equal(waiting.started_at, null, 'a waiting turn has not started')
    for (const id of [running.id, waiting.id]) {
      const seen = await onEach(`/v1/sessions/${s.id}/turns/${id}`)
      for (const got of seen) assert.equal(got.status, 200, got.text)
      assert.deepEqual(seen[1]!.body, seen[0]!.body, 'nodes 0 and 1 read the same turn')
      assert.deepEqual(seen[2]!.body, seen[0]!.body, 'nodes 0 and 2 read the same turn')
    }
    assert.equal((await c.api('GET', `/v1/sessions/${s.id}/turns/${waiting.id}`)).body.started_at, null)
    // The queue's five places are counted in the store: four more spread over the nodes fill it,
    // and a sixth is refused by whichever node it reaches.
    const more: Turn[] = []
    for (let k = 0; k < 4; k++) more.push(await send(s.id, `extra ${k} ${tag()}`))
    for (let i = 0; i < NODES; i++) {
      const full = await c.on(i, 'POST', `/v1/sessions/${s.id}/messages`, { text: 'one too many' })
      assert.equal(full.status, 429, `node ${i}: ${full.text}`)
      assert.equal(full.body.error.code, 'queue_full', `node ${i}: ${full.text}`)
    }
    // Waiting turns cancelled through any node never start.
    for (const t of more) {
      const gone = await c.api('POST', `/v1/sessions/${s.id}/turns/${t.id}/cancel`)
      assert.equal(gone.status, 200, `node ${gone.node}: ${gone.text}`)
      assert.equal(gone.body.started_at, null)
    }

    const stop = await c.on(s.others[1], 'POST', `/v1/sessions/${s.id}/turns/${running.id}/cancel`)
    assert.equal(stop.status, 200, stop.text)
    assert.equal(stop.body.status, 'cancelled')
    assert.equal((await settled(s.id, waiting.id)).status, 'completed')
    assert.equal(secondAsked.length, 1, 'the waiting turn ran once')
    const again = await c.on(s.others[0], 'POST', `/v1/sessions/${s.id}/turns/${running.id}/cancel`)
    assert.equal(again.status, 409, again.text)

    const all = await items(s.id)
    for (let i = 0; i < NODES; i++) assert.deepEqual(await items(s.id, i), all, `node ${i} reads the same items`)
    const result = all.filter((i) => i.turn_id === running.id && i.detail.event === 'agent.tool_result')
    assert.equal(result.length, 1, 'one result for the cut command')
    assert.equal(result[0]!.detail.cancelled, true, 'the command was cut by the cancel')
    assert.deepEqual(all.filter((i) => i.detail.event === 'turn.started').map((i) => i.turn_id), [running.id, waiting.id])
    assert.deepEqual(all.filter((i) => i.detail.event === 'message.queued').map((i) => i.turn_id), [waiting.id, ...more.map((t) => t.id)])
    assert.deepEqual(all.filter((i) => i.detail.event === 'turn.ended').map((i) => i.turn_id), [...more.map((t) => t.id), running.id, waiting.id])
    const turns = await onEach(`/v1/sessions/${s.id}/turns?order=asc&limit=100`)
    const want = [[running.id, 'cancelled'], [waiting.id, 'completed'], ...more.map((t) => [t.id, 'cancelled'])]
    for (const list of turns) assert.deepEqual(list.body.data.map((t: Turn) => [t.id, t.status]), want)
  })

  it('steer and tools: text steered and tools replaced through non-owners reach the running turn’s next step on the owner', async () => {
    const s = await session()
    const text = `build it ${tag()}`
    const steer = `Also add tests ${tag()}`
    const asked = script(text, { toolCalls: [{ name: 'bash', args: { command: 'touch started; while [ ! -f go ]; do sleep 0.05; done; echo released' } }] })
    route(steer, (req) => {
      asked.push(req)
      return { text: 'done, tests too' }
    })
    const turn = await send(s.id, text, s.others[0])
    const dir = workspaceOn(s.owner, s.id)
    await waitFor('the command runs on the owner', async () => fs.existsSync(path.join(dir, 'started')), 60_000)
    const steered = await c.on(s.others[1], 'POST', `/v1/sessions/${s.id}/messages`, { text: steer, steer: true })
    assert.equal(steered.status, 202, steered.text)
    assert.equal(steered.body.id, turn.id, 'the answer is the running turn')
    const tools = await c.on(s.others[0], 'PUT', `/v1/sessions/${s.id}/tools`, { tools: [{ type: 'function', name: 'lookup_order', description: 'Look up an order.', parameters: { type: 'object', properties: {} } }] })
    assert.equal(tools.status, 200, tools.text)
    await waitForEvent(s.id, 'user.message', (d) => d.text === steer)
    fs.writeFileSync(path.join(dir, 'go'), '')
    assert.equal((await settled(s.id, turn.id)).status, 'completed')
    assert.equal(asked.length, 2, 'one model call a step')
    assert.equal(asked[1]!.lastUserText, steer, 'the steered text reached the next step')
    assert.ok(asked[1]!.tools.includes('lookup_order'), `the replaced tools reached the next step: ${asked[1]!.tools.join(',')}`)
    assert.ok(!asked[0]!.tools.includes('lookup_order'))
    for (const list of await onEach(`/v1/sessions/${s.id}/turns?limit=100`)) assert.deepEqual(list.body.data.map((t: Turn) => t.id), [turn.id], 'no new turn')
  })

  it('idle pause: a paused workspace is woken on its owner by a message sent through a non-owner, its files as they were', async () => {
    const s = await session()
    const marker = `kept-${tag()}`
    const write = `write a marker ${tag()}`
    script(write, { toolCalls: [{ name: 'bash', args: { command: `echo ${marker} > kept.txt` } }] }, { text: 'written' })
    assert.equal((await settled(s.id, (await send(s.id, write)).id)).status, 'completed')
    await waitFor('every node sees the workspace paused', async () => (await onEach(`/v1/sessions/${s.id}`)).every((r) => r.body.environment.state === 'paused'), 60_000)
    const read = `read the marker ${tag()}`
    const asked = script(read, { toolCalls: [{ name: 'bash', args: { command: 'cat kept.txt' } }] }, { text: 'read' })
    const turn = await send(s.id, read, s.others[1])
    assert.equal((await settled(s.id, turn.id)).status, 'completed')
    assert.ok(asked[1]!.toolResults.at(-1)!.content.includes(marker), `the woken workspace holds the marker: ${JSON.stringify(asked[1]!.toolResults.at(-1))}`)
    for (const o of s.others) assert.equal(fs.existsSync(workspaceOn(o, s.id)), false, `the workspace woke on its owner, not on node ${o}`)
    const moves = (await items(s.id)).map((i) => i.detail.event).filter((e) => e === 'sandbox.paused' || e === 'sandbox.resumed')
    assert.deepEqual(moves.slice(0, 2), ['sandbox.paused', 'sandbox.resumed'])
  })

  it('approvals: approved through a non-owner the call runs on the owner and the turn goes on; refused through another, the model is told why', async () => {
    const s = await session({ agent: { model: 'm1', approval_mode: 'ask' } })
    const text = `write two files ${tag()}`
    const reason = 'Not that one.'
    const asked = script(
      text,
      { toolCalls: [{ id: 'call_w1', name: 'write_file', args: { path: 'approved.txt', content: 'approved\n' } }] },
      { toolCalls: [{ id: 'call_w2', name: 'write_file', args: { path: 'refused.txt', content: 'no\n' } }] },
      { text: 'done' },
    )
    const turn = await send(s.id, text)
    await waitForEvent(s.id, 'approval.requested', (d) => d.toolCallId === 'call_w1')
    const ok = await c.on(s.others[0], 'POST', `/v1/sessions/${s.id}/approvals/call_w1`, { approved: true })
    assert.equal(ok.status, 200, ok.text)
    assert.equal(ok.body.approved, true)
    await waitForEvent(s.id, 'approval.requested', (d) => d.toolCallId === 'call_w2')
    assert.equal(fs.readFileSync(path.join(workspaceOn(s.owner, s.id), 'approved.txt'), 'utf8'), 'approved\n', 'the approved write ran in the owner’s workspace')
    const no = await c.on(s.others[1], 'POST', `/v1/sessions/${s.id}/approvals/call_w2`, { approved: false, reason })
    assert.equal(no.status, 200, no.text)
    assert.equal(no.body.approved, false)
    const twice = await c.on(s.owner, 'POST', `/v1/sessions/${s.id}/approvals/call_w2`, { approved: true })
    assert.equal(twice.status, 409, twice.text)

    assert.equal((await settled(s.id, turn.id)).status, 'completed')
    assert.equal(asked.length, 3, 'one model call a step')
    const refused = asked[2]!.toolResults.find((r) => r.toolCallId === 'call_w2')
    assert.ok(refused && refused.content.includes('Not run:') && refused.content.includes(reason), `the model is told of the refusal: ${JSON.stringify(refused)}`)
    assert.equal(fs.existsSync(path.join(workspaceOn(s.owner, s.id), 'refused.txt')), false)
    const resolved = (await items(s.id)).filter((i) => i.detail.event === 'approval.resolved').map((i) => [i.detail.toolCallId, i.detail.approved])
    assert.deepEqual(resolved, [['call_w1', true], ['call_w2', false]])
  })

  it('functions: a required action is seen on every node and answered through a non-owner; the turn goes on with the output', async () => {
    const s = await session({ tools: [{ type: 'function', name: 'lookup_order', description: 'Look up an order.', parameters: { type: 'object', properties: { id: { type: 'string' } } } }] })
    const text = `look up an order ${tag()}`
    const asked = script(text, { toolCalls: [{ id: 'call_o1', name: 'lookup_order', args: { id: 'A-1' } }] }, (req) => ({ text: `the order: ${req.toolResults.at(-1)!.content}` }))
    const turn = await send(s.id, text)
    await waitFor('every node sees the required action', async () => {
      const seen = await onEach(`/v1/sessions/${s.id}`)
      return seen.every((r) => r.body.status === 'requires_action' && r.body.required_actions.length === 1)
    })
    for (const [i, list] of (await onEach('/v1/sessions?status=requires_action&limit=100')).entries()) {
      assert.ok(list.body.data.some((x: { id: string }) => x.id === s.id), `node ${i} lists the session under status=requires_action`)
    }
    const answered = await c.on(s.others[0], 'POST', `/v1/sessions/${s.id}/required_actions/call_o1`, { output: { status: 'shipped' } })
    assert.equal(answered.status, 200, answered.text)
    const twice = await c.on(s.others[1], 'POST', `/v1/sessions/${s.id}/required_actions/call_o1`, { output: { status: 'lost' } })
    assert.equal(twice.status, 409, twice.text)
    assert.equal((await settled(s.id, turn.id)).status, 'completed')
    assert.equal(asked.length, 2, 'one model call a step')
    assert.match(asked[1]!.toolResults.at(-1)!.content, /shipped/)
    for (const got of await onEach(`/v1/sessions/${s.id}`)) assert.deepEqual(got.body.required_actions, [])
  })

  it('questions: asked on the owner, answered through a non-owner; the answer is the tool result', async () => {
    const s = await session()
    const text = `ask me ${tag()}`
    const asked = script(text, { toolCalls: [{ id: 'call_q', name: 'ask_question', args: { question: 'Which one?', options: ['a', 'b'], allow_freeform: false } }] }, { text: 'chosen' })
    const turn = await send(s.id, text)
    await waitForEvent(s.id, 'question.asked')
    const answered = await c.on(s.others[1], 'POST', `/v1/sessions/${s.id}/questions/call_q`, { answer: 'b' })
    assert.equal(answered.status, 200, answered.text)
    assert.equal((await settled(s.id, turn.id)).status, 'completed')
    assert.equal(asked.length, 2)
    assert.match(asked[1]!.toolResults.at(-1)!.content, /\bb\b/)
    assert.deepEqual((await items(s.id)).filter((i) => i.detail.event === 'question.answered').map((i) => i.detail.answer), ['b'])
  })

  it('files: uploaded through a non-owner they land in the owner’s workspace, where a later bash call reads them', async () => {
    const s = await session()
    await waitForEvent(s.id, 'sandbox.created')
    const marker = `uploaded-${tag()}`
    const up = await c.on(s.others[0], 'POST', `/v1/sessions/${s.id}/files`, { files: [{ path: 'in/up.txt', content: b64(marker) }] })
    assert.equal(up.status, 200, up.text)
    assert.deepEqual(up.body.data, [{ path: 'in/up.txt', size_bytes: marker.length }])
    assert.equal(fs.readFileSync(path.join(workspaceOn(s.owner, s.id), 'in/up.txt'), 'utf8'), marker)
    for (const o of s.others) assert.equal(fs.existsSync(workspaceOn(o, s.id)), false, `no second workspace came up on node ${o}`)
    const text = `read the upload ${tag()}`
    const asked = script(text, { toolCalls: [{ name: 'bash', args: { command: 'cat in/up.txt' } }] }, { text: 'read' })
    assert.equal((await settled(s.id, (await send(s.id, text, s.others[1])).id)).status, 'completed')
    assert.ok(asked[1]!.toolResults.at(-1)!.content.includes(marker), `bash read ${JSON.stringify(asked[1]!.toolResults.at(-1))}`)
    // Bad input is refused the same on a node that passes the request on.
    const bad = await c.on(s.others[1], 'POST', `/v1/sessions/${s.id}/files`, { files: [{ path: '../escape', content: b64('x') }] })
    assert.equal(bad.status, 400, bad.text)
    // Another organization's token is a 404 on every node, and nothing it sent reaches the workspace.
    for (let i = 0; i < NODES; i++) {
      const foreign = await c.on(i, 'POST', `/v1/sessions/${s.id}/files`, { files: [{ path: `foreign-${i}.txt`, content: b64('x') }] }, outsider)
      assert.equal(foreign.status, 404, `node ${i}: ${foreign.text}`)
      assert.equal(fs.existsSync(path.join(workspaceOn(s.owner, s.id), `foreign-${i}.txt`)), false)
    }
  })

  it('artifacts: published on the owner, listed and downloaded byte for byte through every node, archived through the others', async () => {
    const s = await session()
    const text = `make artifacts ${tag()}`
    script(text, { toolCalls: [{ name: 'bash', args: { command: 'mkdir -p out && printf "hello artifacts\\n" > out/hello.txt && head -c 70000 /dev/urandom > out/noise.bin' } }] }, { text: 'made' })
    const turn = await settled(s.id, (await send(s.id, text)).id)
    assert.equal(turn.status, 'completed')
    assert.equal(turn.artifacts, 'ready')
    const noise = fs.readFileSync(path.join(workspaceOn(s.owner, s.id), 'out/noise.bin'))

    const lists = await onEach(`/v1/sessions/${s.id}/artifacts?order=asc&limit=100`)
    for (const list of lists) assert.deepEqual(list.body, lists[0]!.body)
    const arts = lists[0]!.body.data as { id: string; path: string; sha256: string; size_bytes: number }[]
    assert.deepEqual(arts.map((a) => a.path).sort(), ['out/hello.txt', 'out/noise.bin'])
    const noiseArt = arts.find((a) => a.path === 'out/noise.bin')!
    assert.equal(noiseArt.sha256, sha(noise))
    for (let i = 0; i < NODES; i++) {
      for (const a of arts) {
        const got = await raw('GET', `/v1/sessions/${s.id}/artifacts/${a.id}/content`, { to: i })
        assert.equal(got.status, 200, `node ${i}: ${got.text.slice(0, 200)}`)
        assert.equal(sha(got.bytes), a.sha256, `node ${i} serves ${a.path} byte for byte`)
      }
    }
    for (const o of s.others) {
      const tar = await raw('GET', `/v1/sessions/${s.id}/artifacts/archive?turn_id=${turn.id}`, { to: o })
      assert.equal(tar.status, 200, `node ${o}: ${tar.text.slice(0, 200)}`)
      const names = execFileSync('tar', ['-tf', '-'], { input: tar.bytes }).toString().trim().split('\n').sort()
      assert.deepEqual(names, ['out/hello.txt', 'out/noise.bin'], `node ${o}'s archive`)
      const bytes = execFileSync('tar', ['-xOf', '-', 'out/noise.bin'], { input: tar.bytes, maxBuffer: 1 << 24 })
      assert.equal(sha(bytes), noiseArt.sha256, `node ${o}'s archive holds the bytes`)
    }
  })

  it('previews: published through a non-owner, served under its host and at the token-gated preview.url by every node', async () => {
    const s = await session()
    const text = `start the site ${tag()}`
    script(text, { toolCalls: [{ name: 'bash', args: { command: startSiteCommand(3000, '127.0.0.1', 'cluster') } }] }, { text: 'started' })
    assert.equal((await settled(s.id, (await send(s.id, text)).id)).status, 'completed')
    const published = await c.on(s.others[0], 'POST', `/v1/sessions/${s.id}/preview`, {})
    assert.equal(published.status, 200, published.text)
    assert.equal(published.body.port, 3000)
    const host = new URL(published.body.url).host
    for (let i = 0; i < NODES; i++) {
      const page = await hostRequest(c.nodes[i]!.service.url, host, '/')
      assert.equal(page.status, 200, `node ${i}: ${page.body.slice(0, 300)}`)
      assert.match(page.body, /<h1 id="title">Hello from cluster<\/h1>/, `node ${i} serves the preview host`)
      const ws = await openWebSocket(c.nodes[i]!.service.url, host, '/ws')
      try {
        assert.equal(ws.status, 101, `node ${i}: ${ws.head}`)
        ws.send(`hello ${i}`)
        assert.equal(await ws.next(), `echo: hello ${i}`, `node ${i} carries the preview's WebSocket`)
      } finally {
        ws.close()
      }
    }
    const read = await c.api('GET', `/v1/sessions/${s.id}`)
    const proxyPath = new URL(read.body.preview.url).pathname
    assert.equal(proxyPath, `/v1/sessions/${s.id}/preview/proxy/`)
    for (let i = 0; i < NODES; i++) {
      const page = await raw('GET', proxyPath, { to: i })
      assert.equal(page.status, 200, `node ${i}: ${page.text.slice(0, 300)}`)
      assert.match(page.text, /<h1 id="title">Hello from cluster<\/h1>/, `node ${i} serves the token-gated preview.url`)
      assert.match(page.headers.get('content-security-policy') ?? '', /^sandbox /, `node ${i}: the API origin's page runs sandboxed`)
      const echo = await raw('PUT', `${proxyPath}echo/a?x=1`, { to: i, body: { hello: i }, headers: { 'x-custom': 'kept' } })
      assert.equal(echo.status, 200, `node ${i}: ${echo.text.slice(0, 300)}`)
      const got = echo.body
      assert.equal(got.method, 'PUT')
      assert.equal(got.url, '/echo/a?x=1', `node ${i}: the site gets the rest of the path and the query`)
      assert.equal(got.body, JSON.stringify({ hello: i }), `node ${i}: the body goes through`)
      assert.equal(got.headers['x-custom'], 'kept')
      assert.equal(got.headers.authorization, undefined, `node ${i}: the caller's token never reaches the workspace`)
      for (const name of Object.keys(got.headers)) assert.doesNotMatch(name, /warren-node/i, `node ${i}: a node's secret never reaches the workspace`)
    }
    // A token of another organization sees no preview through any node.
    for (let i = 0; i < NODES; i++) assert.equal((await raw('GET', proxyPath, { to: i, token: outsider })).status, 404, `node ${i}`)

    // Taken down through a node that is not the owner, it is down at once everywhere: a WebSocket
    // open through each node is cut, and each node answers the host with its 404 page.
    const open = await Promise.all(Array.from({ length: NODES }, (_, i) => openWebSocket(c.nodes[i]!.service.url, host, '/ws')))
    try {
      for (const [i, ws] of open.entries()) assert.equal(ws.status, 101, `node ${i}: ${ws.head}`)
      const down = await c.on(s.others[1], 'DELETE', `/v1/sessions/${s.id}/preview`)
      assert.equal(down.status, 200, down.text)
      assert.deepEqual(down.body, { object: 'preview.deleted', id: s.id, deleted: true })
      const cut = open.map((ws) => {
        const seen = { closed: false }
        void ws.closed.then(() => (seen.closed = true))
        return seen
      })
      for (const [i, seen] of cut.entries()) await waitFor(`the WebSocket opened through node ${i} is cut`, async () => seen.closed, 10_000)
    } finally {
      for (const ws of open) ws.close()
    }
    for (let i = 0; i < NODES; i++) assert.equal((await hostRequest(c.nodes[i]!.service.url, host, '/')).status, 404, `node ${i} no longer serves the host`)
  })

  it('streams: a stream on one node sees a turn driven on another live, in order, no gap and no double; a third node resumes with exactly the rest', async () => {
    // The organization's stream, opened on every node before the session exists.
    const everywhere = await Promise.all(Array.from({ length: NODES }, (_, i) => openSse(c.nodes[i]!.service.url, '/v1/events', { token: c.token })))
    for (const [i, org] of everywhere.entries()) assert.equal(org.status, 200, `node ${i}: ${org.body}`)
    const s = await session()
    await waitForEvent(s.id, 'sandbox.created')
    const [a, b] = s.others
    const live = await openSse(c.nodes[a]!.service.url, `/v1/sessions/${s.id}/events`, { token: c.token })
    assert.equal(live.status, 200, live.body)
    try {
      const text = `stream this ${tag()}`
      script(text, { toolCalls: [{ name: 'bash', args: { command: 'echo one; echo two' } }] }, { toolCalls: [{ name: 'bash', args: { command: 'echo three' } }] }, { text: 'streamed' })
      const turn = await send(s.id, text, b)
      await live.until('turn.ended on the stream', (evs) => evs.some((f) => f.event === 'turn.ended' && f.data?.payload?.turnId === turn.id), 60_000)
      assert.equal((await settled(s.id, turn.id)).status, 'completed')
      const seqs = live.events().filter((f) => f.id !== undefined).map((f) => Number(f.id))
      assert.equal(new Set(seqs).size, seqs.length, 'no frame twice')
      // Transient frames too (never recorded): the owner's token deltas reach a stream on another node.
      const deltas = (evs: Frame[]) => evs.filter((f) => f.event === 'agent.text').map((f) => f.data.payload.delta as string).join('')
      await live.until(`the stream on node ${a} carries the owner's deltas`, (evs) => deltas(evs).includes('streamed'))
      assert.deepEqual([...seqs].sort((x, y) => x - y), seqs, 'frames in order')
      // Every item recorded from the turn's first one to the last frame is on the stream, in order.
      const all = await items(s.id)
      const start = seqOf(all.find((i) => i.turn_id === turn.id)!.id)
      const want = all.map((i) => seqOf(i.id)).filter((q) => q >= start && q <= seqs.at(-1)!)
      assert.ok(want.length >= 6, `the turn recorded its steps: ${want.join(',')}`)
      const itemSeqs = new Set(want)
      assert.deepEqual(seqs.filter((q) => itemSeqs.has(q)), want, 'the stream carries the recorded events, none missing or doubled')
      const streamed = seqs.filter((q) => q >= start)

      // Resume on the third node from the middle: exactly what followed, live frames aside.
      const cut = streamed[Math.floor(streamed.length / 2)]!
      const resumed = await openSse(c.nodes[s.owner]!.service.url, `/v1/sessions/${s.id}/events`, { token: c.token, lastEventId: String(cut) })
      try {
        assert.equal(resumed.status, 200, resumed.body)
        const last = seqs.at(-1)!
        await resumed.until('the rest is replayed', (evs) => evs.some((f) => Number(f.id) === last))
        // Events recorded after the live stream's last frame may follow on the resumed one: not compared.
        assert.deepEqual(
          resumed.events().filter((f) => f.id !== undefined).map((f) => Number(f.id)).filter((q) => q <= last),
          seqs.filter((q) => q > cut),
          'the resumed stream starts right after the cut and has exactly the rest',
        )
      } finally {
        resumed.close()
      }
      // A session created after the organization's streams opened appears on each, wherever it runs.
      for (const [i, org] of everywhere.entries()) {
        const mine = (evs: Frame[]) => evs.filter((f) => f.id !== undefined && f.data?.session_id === s.id).map((f) => Number(f.id))
        await org.until(`node ${i}'s organization stream reaches the session's last frame`, (evs) => mine(evs).includes(seqs.at(-1)!))
        assert.deepEqual(mine(org.events()).filter((q) => q >= start && q <= seqs.at(-1)!), streamed, `node ${i}'s organization stream has the session's frames, in order`)
      }
    } finally {
      live.close()
      for (const org of everywhere) org.close()
    }
  })

  it('webhooks: each event is delivered exactly once though three delivery workers run', async () => {
    const where = `/cluster-${tag()}`
    const events = ['session.created', 'session.working', 'session.action_required', 'session.idle', 'session.failed', 'turn.completed', 'turn.failed']
    const sub = await c.api('POST', '/v1/webhooks', { url: receiver.url(where), events })
    assert.equal(sub.status, 201, sub.text)
    try {
      const lookup = { type: 'function', name: 'lookup_order', description: 'Look up an order.', parameters: { type: 'object', properties: {} } }
      const ids: string[] = []
      for (let i = 0; i < NODES; i++) ids.push((await session({ tools: [lookup] })).id)
      const owner = (await c.query<{ owner_node: string }>('SELECT owner_node FROM {schema}.sessions WHERE id = $1', [ids[0]]))[0]!.owner_node
      const text = `hooked ${tag()}`
      script(text, { toolCalls: [{ id: 'call_h1', name: 'lookup_order', args: {} }] }, { text: 'hooked' })
      const turn = await send(ids[0]!, text)
      await waitFor('the turn waits on the function', async () => (await c.api('GET', `/v1/sessions/${ids[0]}`)).body.status === 'requires_action', 60_000)
      const answered = await c.on((indexOf.get(owner)! + 1) % NODES, 'POST', `/v1/sessions/${ids[0]}/required_actions/call_h1`, { output: 'ok' })
      assert.equal(answered.status, 200, answered.text)
      assert.equal((await settled(ids[0]!, turn.id)).status, 'completed')
      const want = [...ids.map((id) => `session.created ${id}`), `session.action_required ${ids[0]} ${turn.id}`, `turn.completed ${ids[0]} ${turn.id}`]
      await receiver.waitFor(where, want.length, 60_000)
      // Everything owed has been sent (nothing pending on any worker) before the count is read.
      await waitFor('no delivery pending', async () => (await c.api('GET', `/v1/webhooks/${sub.body.id}`)).body.delivery.pending === 0)
      const received = receiver.received(where)
      const got = received.map((r) => JSON.parse(r.body) as { type: string; data: { session_id: string; turn_id?: string } }).map((e) => [e.type, e.data.session_id, ...(e.data.turn_id ? [e.data.turn_id] : [])].join(' '))
      for (const w of want) assert.equal(got.filter((g) => g === w).length, 1, `${w} once in:\n${got.join('\n')}`)
      // Exactly once: one request per delivery the store holds for the subscription, each sent once.
      const rows = await c.query<{ id: string; attempts: number }>('SELECT id, attempts FROM {schema}.webhook_deliveries WHERE subscription_id = $1', [sub.body.id])
      assert.deepEqual(received.map((r) => String(r.headers['x-warren-delivery'])).sort(), rows.map((r) => r.id).sort(), 'one request per delivery, none twice')
      assert.deepEqual(rows.filter((r) => Number(r.attempts) !== 1), [], 'every delivery went out in one attempt')
    } finally {
      assert.equal((await c.api('DELETE', `/v1/webhooks/${sub.body.id}`)).status, 200)
    }
  })

  it('limits: concurrent creates spread over the nodes never pass the organization’s session ceiling; a slot freed on one node is taken on another; the stream ceiling is shared', async () => {
    const token = await c.nodes[1]!.service.mint(`limits-${tag()}`)
    const mc = await c.api('POST', '/v1/model-credentials', { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] }, token)
    assert.equal(mc.status, 201, mc.text)
    const tries = await Promise.all(Array.from({ length: MAX_SESSIONS + 4 }, () => c.api('POST', '/v1/sessions', {}, token)))
    const created = tries.filter((r) => r.status === 201)
    const refused = tries.filter((r) => r.status !== 201)
    assert.equal(created.length, MAX_SESSIONS, `exactly the ceiling is created: ${tries.map((r) => r.status).join(',')}`)
    assert.deepEqual(new Set(created.map((r) => r.node)), new Set([0, 1, 2]), 'the creates were spread over every node')
    for (const r of refused) {
      assert.equal(r.status, 429, r.text)
      assert.equal(r.body.error.code, 'project_limit_exceeded', r.text)
    }
    const freed = created[0]!
    assert.equal((await c.on((freed.node + 1) % NODES, 'DELETE', `/v1/sessions/${freed.body.id}`, undefined, token)).status, 200)
    const taken = await c.on((freed.node + 2) % NODES, 'POST', '/v1/sessions', {}, token)
    assert.equal(taken.status, 201, taken.text)
    const full = await c.on(freed.node, 'POST', '/v1/sessions', {}, token)
    assert.equal(full.status, 429, full.text)
    const list = await c.api('GET', '/v1/sessions?limit=100', undefined, token)
    assert.equal(list.body.data.length, MAX_SESSIONS)
    // The cluster's organization does not see these, on any node.
    for (let i = 0; i < NODES; i++) assert.equal((await c.on(i, 'GET', `/v1/sessions/${taken.body.id}`)).status, 404)

    // Five open streams per token, wherever they are opened.
    const streams = []
    try {
      for (let k = 0; k < 5; k++) {
        const s = await openSse(c.nodes[k % NODES]!.service.url, '/v1/events', { token })
        assert.equal(s.status, 200, s.body)
        streams.push(s)
      }
      for (let i = 0; i < NODES; i++) {
        const sixth = await openSse(c.nodes[i]!.service.url, '/v1/events', { token })
        streams.push(sixth)
        assert.equal(sixth.status, 429, `node ${i} opened a sixth stream of one token`)
        assert.equal(JSON.parse(sixth.body).error.code, 'rate_limit_exceeded')
      }
    } finally {
      for (const s of streams) s.close()
    }
    for (const r of [...created.slice(1), taken]) assert.equal((await c.api('DELETE', `/v1/sessions/${r.body.id}`, undefined, token)).status, 200)
  })

  it('idempotency: one Idempotency-Key sent to two nodes, in turn and at once, creates one session and replays the same answer', async () => {
    const key = `key-${tag()}`
    const label = `idem-${tag()}`
    const body = { metadata: { idem: label } }
    const first = await raw('POST', '/v1/sessions', { to: 0, body, headers: { 'idempotency-key': key } })
    assert.equal(first.status, 201, first.text)
    made.push(first.body.id)
    const replay = await raw('POST', '/v1/sessions', { to: 1, body, headers: { 'idempotency-key': key } })
    assert.equal(replay.status, 201, replay.text)
    assert.equal(replay.text, first.text, 'node 1 replays node 0’s answer')

    const key2 = `key-${tag()}`
    const label2 = `idem-${tag()}`
    const at = await Promise.all(Array.from({ length: NODES }, (_, i) => raw('POST', '/v1/sessions', { to: i, body: { metadata: { idem: label2 } }, headers: { 'idempotency-key': key2 } })))
    const ok = at.filter((r) => r.status === 201)
    assert.ok(ok.length >= 1, at.map((r) => `${r.status} ${r.text}`).join('\n'))
    made.push(ok[0]!.body.id)
    for (const r of ok) assert.equal(r.text, ok[0]!.text, 'every 201 is the one answer')
    for (const r of at.filter((r) => r.status !== 201)) {
      assert.equal(r.status, 409, r.text)
      assert.equal(r.body.error.code, 'conflict')
    }
    for (let i = 0; i < NODES; i++) {
      const again = await raw('POST', '/v1/sessions', { to: i, body: { metadata: { idem: label2 } }, headers: { 'idempotency-key': key2 } })
      assert.equal(again.status, 201, again.text)
      assert.equal(again.text, ok[0]!.text, `node ${i} replays the answer`)
    }
    for (const [l, id] of [[label, first.body.id], [label2, ok[0]!.body.id]]) {
      const list = await c.api('GET', `/v1/sessions?metadata=${encodeURIComponent(`idem:${l}`)}&limit=100`)
      assert.deepEqual(list.body.data.map((x: { id: string }) => x.id), [id], 'one session per key')
    }

    // A message carrying files is passed on to the owner; the key is kept by the node it reached,
    // and still one turn comes of it when two non-owners get it at once.
    const s = await session()
    await waitForEvent(s.id, 'sandbox.created')
    const text = `read the attached file ${tag()}`
    const marker = `attached-${tag()}`
    const asked = script(text, { toolCalls: [{ name: 'bash', args: { command: 'cat attached.txt' } }] }, { text: 'read it' })
    const message = { text, files: [{ path: 'attached.txt', content: b64(marker) }] }
    const key3 = `key-${tag()}`
    const sent = await Promise.all(s.others.map((o) => raw('POST', `/v1/sessions/${s.id}/messages`, { to: o, body: message, headers: { 'idempotency-key': key3 } })))
    const accepted = sent.filter((r) => r.status === 202)
    assert.ok(accepted.length >= 1, sent.map((r) => `${r.status} ${r.text}`).join('\n'))
    for (const r of sent.filter((r) => r.status !== 202)) assert.equal(r.status, 409, r.text)
    const turnId = accepted[0]!.body.id as string
    for (const o of [...s.others, s.owner]) {
      const again = await raw('POST', `/v1/sessions/${s.id}/messages`, { to: o, body: message, headers: { 'idempotency-key': key3 } })
      assert.equal(again.status, 202, again.text)
      assert.equal(again.body.id, turnId, `node ${o} replays the accepted turn`)
    }
    assert.equal((await settled(s.id, turnId)).status, 'completed')
    assert.equal(asked.length, 2, 'one turn, one model call a step')
    assert.ok(asked[1]!.toolResults.at(-1)!.content.includes(marker), 'the attached file was in the owner’s workspace for the turn')
    const turns = await c.api('GET', `/v1/sessions/${s.id}/turns?limit=100`)
    assert.deepEqual(turns.body.data.map((t: Turn) => t.id), [turnId])
  })
})
