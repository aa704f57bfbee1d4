// A node lost during a session's first turn (issue 25, item 8): the session has no snapshot yet,
// so the node that takes it over rebuilds its workspace from the state it was created in (seed
// files, template setup) and the turn completes there. Real `warren serve` child processes on one
// PostgreSQL schema (test/cluster.ts); a node killed is started again for the next test. Here too,
// sharing the cluster: a node lost mid command in an image workspace (issue 26), whose takeover
// starts the pinned digest with the session's own layer from its snapshot.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { startCluster, type Cluster } from './cluster.ts'
import { allItems, connectModel, createSession, ownerIndex, render, RESTORED_NOTE, routeAcrossRestore, send, sessionWithMarker, settled, tag, type Turn } from './cluster.helpers.ts'
import { startModelServer, type FakeModelServer, type ModelRequest, type ScriptStep } from './fakes/model-server.ts'
import { setTimeout as sleep } from 'node:timers/promises'
import { waitFor } from './fixtures.ts'
import { onPostgres } from './harness.ts'
import { openSse } from './sse-client.ts'
import { spawnSync } from 'node:child_process'
import { gzipLayer, pushImage, pushMinimalImage, startRegistry, tarOf } from './registry.ts'

const noImages = process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v docker-registry && command -v skopeo']).status !== 0 ? 'needs docker-registry and skopeo' : false

/** The template every session here starts from: its setup script leaves a file of its own. */
const TEMPLATE = 'first-turn'
/** A session with a seed file, from the template. */
const seededBody = (marker: string) => ({
  environment: { template: TEMPLATE, files: [{ path: 'seed.txt', content: Buffer.from(`seed ${marker}\n`).toString('base64') }] },
})

onPostgres('cluster: a node lost during a first turn', () => {
  let fake: FakeModelServer
  let c: Cluster
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    // The image test's registry is on loopback: the nodes pull from it only when told.
    c = await startCluster({ nodes: 2, env: { WARREN_IMAGE_ALLOW_PRIVATE: '127.0.0.1/32' } })
    await connectModel(c, 0, fake)
    const t = await c.on(0, 'POST', '/v1/environment-templates', { name: TEMPLATE, setup: 'echo set-up > /workspace/setup.txt' })
    assert.equal(t.status, 201, t.text)
  })
  after(async () => {
    await c?.close()
    await fake?.close()
  })
  const ensureLive = async (...nodes: number[]) => {
    for (const i of nodes) if (!c.live().includes(i)) await c.start(i)
  }
  const nodeId = async (i: number): Promise<string> => (await c.on(i, 'GET', '/v1/health')).body.node.id
  /** Stops node `i` (SIGSTOP) until another node declares it dead, then lets `whileStopped` run before it wakes. */
  async function pausePastLease(i: number, whileStopped: () => Promise<void> = async () => {}): Promise<string> {
    const id = await nodeId(i)
    const pid = c.nodes[i]!.service.pid!
    process.kill(pid, 'SIGSTOP')
    try {
      await waitFor(`node ${i} is declared dead while stopped`, async () => (await c.query<{ stopped_at: unknown }>('SELECT stopped_at FROM {schema}.nodes WHERE id = $1', [id]))[0]?.stopped_at != null, 60_000)
      await whileStopped()
    } finally {
      process.kill(pid, 'SIGCONT')
    }
    return id
  }
  /** A promise a test opens when it chooses: a model answer held back until then. */
  const gate = () => {
    let open!: () => void
    const opened = new Promise<void>((resolve) => (open = resolve))
    return { opened, open }
  }
  const messages = (items: Awaited<ReturnType<typeof allItems>>) => items.filter((i) => i.detail.event === 'agent.message').map((i) => i.detail.text)
  const runningCall = async (turnId: string) => (await c.query<{ running_call: string | null }>('SELECT running_call FROM {schema}.turns WHERE id = $1', [turnId]))[0]?.running_call

  /** Asserts the turn completed on node 1 after node 0 died, and what the model saw after the cut. */
  async function completedElsewhere(sessionId: string, turn: Turn, told: () => ModelRequest | null, listing: () => string | null, lost = true) {
    const done = await settled(c, sessionId, turn.id)
    assert.equal(done.status, 'completed', `${JSON.stringify(done)}\n${render(await allItems(c, sessionId))}`)
    assert.equal(await ownerIndex(c, sessionId), 1, 'node 1 took the session over')
    const items = await allItems(c, sessionId)
    const req = told()
    assert.ok(req, 'the model was asked on the node that took over')
    const seen = () => `${JSON.stringify(req.messages)}\n${render(items)}`
    if (lost) assert.ok(req.lastUserText?.startsWith(RESTORED_NOTE) && /state it was created in/.test(req.lastUserText), `the model is told the workspace was rebuilt: ${seen()}`)
    // Nothing of the turn had run in the workspace: the note is for people, the model hears nothing.
    else assert.ok(!JSON.stringify(req.messages).includes(RESTORED_NOTE) && items.some((i) => i.detail.event === 'agent.error' && String(i.detail.message).includes('state it was created in')), `the rebuild is said to people only: ${seen()}`)
    const files = listing()
    assert.ok(files !== null && files.includes('seed.txt') && files.includes('setup.txt') && !files.includes('partial.txt'), `the rebuilt workspace holds the creation state only: ${JSON.stringify(files)}`)
    assert.ok(!items.some((i) => i.detail.event === 'workspace.recovery_failed'), render(items))
  }

  it('SIGKILLed during the first turn\'s command: the other node rebuilds the workspace from its creation state and the turn completes', async () => {
    await ensureLive(0, 1)
    const text = `first turn command ${tag()}`
    let told: ModelRequest | null = null
    let listing: string | null = null
    routeAcrossRestore(fake, text, (req): ScriptStep => {
      if (req.toolResults.length === 0) return { toolCalls: [{ id: 'call_long', name: 'bash', args: { command: 'echo partial > /workspace/partial.txt; sleep 60; echo finished' } }] }
      if (req.toolResults.length === 1) {
        told = req
        return { toolCalls: [{ id: 'call_look', name: 'bash', args: { command: 'ls /workspace' } }] }
      }
      listing = req.toolResults.at(-1)!.content
      return { text: 'done after the cut' }
    })
    const sessionId = await createSession(c, 0, seededBody(tag()))
    const turn = await send(c, 0, sessionId, text)
    await waitFor('the first turn runs its command on node 0', async () => (await runningCall(turn.id)) === 'call_long', 60_000)
    assert.equal(await ownerIndex(c, sessionId), 0, 'control: node 0 runs the session')
    await c.kill(0, 'SIGKILL')
    await completedElsewhere(sessionId, turn, () => told, () => listing)
  })

  it('SIGKILLed during the first turn\'s model stream: the other node rebuilds the workspace and asks the model again, with nothing lost to tell it', async () => {
    await ensureLive(0, 1)
    const text = `first turn stream ${tag()}`
    let streams = 0
    let told: ModelRequest | null = null
    let listing: string | null = null
    routeAcrossRestore(fake, text, (req): ScriptStep => {
      if (streams++ === 0) return { hang: true, text: 'thinking' }
      // Asked again from the start; the workspace comes up for the first command, and the step
      // after it learns how.
      if (req.toolResults.length === 0) return { toolCalls: [{ id: 'call_look', name: 'bash', args: { command: 'ls /workspace' } }] }
      told = req
      listing = req.toolResults.at(-1)!.content
      return { text: 'done after the cut' }
    })
    const sessionId = await createSession(c, 0, seededBody(tag()))
    // The workspace is up and seeded before the turn: the stream is cut after its creation state
    // exists (a takeover during the seeding just seeds it, with nothing of the agent's to lose).
    await waitFor('the workspace is seeded on node 0', async () => {
      const [row] = await c.query<{ environment: string }>('SELECT environment FROM {schema}.sessions WHERE id = $1', [sessionId])
      return row !== undefined && JSON.parse(row.environment).initialized === true
    }, 60_000)
    const turn = await send(c, 0, sessionId, text)
    await waitFor('node 0 streams the first answer', async () => streams >= 1, 60_000)
    await c.kill(0, 'SIGKILL')
    await completedElsewhere(sessionId, turn, () => told, () => listing, false)
  })

  it('killed as soon as a turn is seen completed: what the turn changed is in the workspace the other node brings back', async () => {
    await ensureLive(0, 1)
    const marker = `kept-${tag()}`
    const write = `write then lose the node ${tag()}`
    routeAcrossRestore(fake, write, (req): ScriptStep => (req.toolResults.length === 0 ? { toolCalls: [{ name: 'bash', args: { command: `echo ${marker} > /workspace/done.txt` } }] } : { text: 'written' }))
    const sessionId = await createSession(c, 0)
    const turn = await send(c, 0, sessionId, write)
    // Watched on node 1, and node 0 killed the moment the turn shows completed, as a caller could.
    await waitFor('the turn completes', async () => (await c.on(1, 'GET', `/v1/sessions/${sessionId}/turns/${turn.id}`)).body.status === 'completed', 60_000)
    await c.kill(0, 'SIGKILL')
    const read = `read it back ${tag()}`
    let content: string | null = null
    routeAcrossRestore(fake, read, (req): ScriptStep => {
      // The first turn's call is in the conversation: this turn's first step has one result.
      if (req.toolResults.length === 1) return { toolCalls: [{ id: 'call_read', name: 'bash', args: { command: 'cat /workspace/done.txt' } }] }
      content = req.toolResults.find((r) => r.toolCallId === 'call_read')?.content ?? null
      return { text: 'read' }
    })
    const again = await settled(c, sessionId, (await send(c, 1, sessionId, read)).id)
    assert.equal(again.status, 'completed', `${JSON.stringify(again)}\n${render(await allItems(c, sessionId))}`)
    assert.equal(await ownerIndex(c, sessionId), 1, 'node 1 took the session over')
    assert.match(content ?? '', new RegExp(marker), `the completed turn's file came back: ${content}`)
  })

  it('SIGKILLed mid command in an image workspace: the other node starts the digest the session first ran, with its own layer, and the turn completes, one model call a step', { skip: noImages }, async () => {
    await ensureLive(0, 1)
    const registry = await startRegistry()
    try {
      await pushMinimalImage(registry, 'warren/minimal', 'moving')
      const image = `${registry.host}/warren/minimal:moving`
      const write = `write into the layer ${tag()}`
      routeAcrossRestore(fake, write, (req): ScriptStep => (req.toolResults.length === 0 ? { toolCalls: [{ name: 'bash', args: { command: 'echo in-layer > /srv/sticky/layer.txt' } }] } : { text: 'written' }))
      const sessionId = await createSession(c, 0, { environment: { image } })
      const first = await settled(c, sessionId, (await send(c, 0, sessionId, write)).id)
      assert.equal(first.status, 'completed', `${JSON.stringify(first)}\n${render(await allItems(c, sessionId))}`)
      const digest = (await c.on(0, 'GET', `/v1/sessions/${sessionId}`)).body.environment.image.digest
      assert.match(String(digest), /^sha256:/)
      await waitFor('the snapshot after the first turn', async () => (await c.query('SELECT 1 FROM {schema}.workspace_snapshots WHERE session_id = $1', [sessionId])).length === 1, 60_000)
      // The tag moves to an image without busybox: a node that followed it could run nothing.
      await pushImage(registry, 'warren/minimal', 'moving', [gzipLayer(tarOf([{ path: 'srv/', type: 'Directory' }, { path: 'srv/other', body: 'other\n' }]))])

      const text = `cut in the image ${tag()}`
      const asked = new Map<number, number>()
      let seen: string | null = null
      routeAcrossRestore(fake, text, (req): ScriptStep => {
        // The first turn's call is in the conversation: this turn's steps are 1 to 3.
        const step = req.toolResults.length
        asked.set(step, (asked.get(step) ?? 0) + 1)
        if (step === 1) return { toolCalls: [{ id: 'call_long', name: 'bash', args: { command: 'sleep 60; echo finished' } }] }
        if (step === 2) return { toolCalls: [{ id: 'call_look', name: 'bash', args: { command: 'busybox cat /srv/hello /srv/sticky/layer.txt && echo more >> /srv/sticky/layer.txt && busybox tail -n 1 /srv/sticky/layer.txt' } }] }
        seen = req.toolResults.at(-1)!.content
        return { text: 'done after the cut' }
      })
      const turn = await send(c, 0, sessionId, text)
      await waitFor('the command runs on node 0', async () => (await runningCall(turn.id)) === 'call_long', 60_000)
      await c.kill(0, 'SIGKILL')
      const done = await settled(c, sessionId, turn.id)
      const items = await allItems(c, sessionId)
      assert.equal(done.status, 'completed', `${JSON.stringify(done)}\n${render(items)}`)
      assert.equal(await ownerIndex(c, sessionId), 1, 'node 1 took the session over')
      assert.deepEqual(Object.fromEntries(asked), { 1: 1, 2: 1, 3: 1 }, 'one model call a step, across the kill')
      // The pinned image (busybox, /srv/hello), and the layer's file, still the agent's own to write.
      assert.match(String(seen), /^hello from the image\nin-layer\nmore\n/, render(items))
      assert.equal((await c.on(1, 'GET', `/v1/sessions/${sessionId}`)).body.environment.image.digest, digest)
    } finally {
      await registry.stop()
    }
  })

  it('a node woken after a pause past its lease creates no session under the identity it lost', async () => {
    await ensureLive(0, 1)
    const text = `created on waking ${tag()}`
    routeAcrossRestore(fake, text, () => ({ text: 'hello after the pause' }))
    let created: ReturnType<Cluster['on']> | null = null
    const lost = await pausePastLease(0, async () => {
      // Sent while node 0 is stopped: it is the first thing it serves on waking.
      created = c.on(0, 'POST', '/v1/sessions', { input: text })
      // Only for the request to be written before the wake; the assertions hold whatever the order.
      await sleep(200)
    })
    let res = await created!
    // Refused while it joins again is allowed; it must then serve the retry under its new identity.
    for (let tries = 0; res.status === 503 && tries < 20; tries++) res = await c.on(0, 'POST', '/v1/sessions', { input: text })
    assert.equal(res.status, 201, res.text)
    const [row] = await c.query<{ owner_node: string | null }>('SELECT owner_node FROM {schema}.sessions WHERE id = $1', [res.body.id])
    assert.notEqual(row?.owner_node, lost, 'the session is not owned by the identity node 0 lost')
    assert.equal(row?.owner_node, await nodeId(0), 'node 0 created it under the identity it joined again with')
    const [turn] = (await c.api('GET', `/v1/sessions/${res.body.id}/turns`)).body.data as Turn[]
    const done = await settled(c, res.body.id, turn!.id)
    assert.equal(done.status, 'completed', `${JSON.stringify(done)}\n${render(await allItems(c, res.body.id))}`)
  })

  it('paused past its lease mid model stream of a first turn: woken with the answer in hand, it writes nothing and asks no more; the other node completes the turn', async () => {
    await ensureLive(0, 1)
    const text = `paused mid stream ${tag()}`
    let asks = 0
    const stale = gate()
    const fresh = gate()
    routeAcrossRestore(fake, text, async (): Promise<ScriptStep> => {
      // The first ask is node 0's, answered only once it is stopped and its session taken over.
      if (++asks === 1) return stale.opened.then(() => ({ text: 'stale answer' }))
      return fresh.opened.then(() => ({ text: 'fresh answer' }))
    })
    const sessionId = await createSession(c, 0)
    // Live deltas reach every node's streams: one on node 1 sees whatever node 0 streams on waking.
    const live = await openSse(c.nodes[1]!.service.url, `/v1/sessions/${sessionId}/events`, { token: c.token })
    assert.equal(live.status, 200, live.body)
    const turn = await send(c, 0, sessionId, text)
    await waitFor('node 0 asks the model', async () => asks >= 1, 60_000)
    const lost = await pausePastLease(0, async () => {
      await waitFor('node 1 takes the turn over and asks the model', async () => asks >= 2, 60_000)
      stale.open()
      // Only so that the answer reaches node 0's socket before it wakes; nothing below relies on it.
      await sleep(200)
    })
    await waitFor('node 0 joins again as a new node', async () => (await nodeId(0)) !== lost, 60_000)
    // Node 1 answers only now: the turn is still working while node 0 wakes with its answer.
    fresh.open()
    const done = await settled(c, sessionId, turn.id)
    const items = await allItems(c, sessionId)
    assert.equal(done.status, 'completed', `${JSON.stringify(done)}\n${render(items)}`)
    assert.deepEqual(messages(items), ['fresh answer'], `the woken node wrote nothing of its answer\n${render(items)}`)
    assert.equal(asks, 2, 'one ask by each node: the woken one asked no more')
    assert.equal(items.filter((i) => i.detail.event === 'turn.ended').length, 1, render(items))
    const frames = await live.until('the live stream sees the turn end', (events) => events.some((f) => f.event === 'turn.ended'), 30_000)
    live.close()
    const deltas = frames.filter((f) => f.event === 'agent.text').map((f) => f.data?.payload?.delta ?? '').join('')
    assert.equal(deltas, 'fresh answer', 'the woken node streamed nothing of its answer')
  })

  it('paused past its lease mid command after a settled turn: woken with the result in hand, it records nothing and asks no more; the other node tells the model the call was cut', async () => {
    await ensureLive(0, 1)
    const { sessionId } = await sessionWithMarker(c, 0, fake)
    const text = `paused mid command ${tag()}`
    const asked = new Map<number, number>()
    const next = gate()
    let cutResult: string | null = null
    routeAcrossRestore(fake, text, async (req): Promise<ScriptStep> => {
      // The conversation holds the first turn's tool result: this turn's steps are 1 and 2.
      const step = req.toolResults.length
      asked.set(step, (asked.get(step) ?? 0) + 1)
      if (step === 1) return { toolCalls: [{ id: 'call_paused', name: 'bash', args: { command: 'sleep 2; echo stale > /workspace/stale.txt; echo stale-done' } }] }
      cutResult = req.toolResults.find((r) => r.toolCallId === 'call_paused')?.content ?? null
      return next.opened.then(() => ({ text: 'after the pause' }))
    })
    const turn = await send(c, 0, sessionId, text)
    await waitFor('node 0 runs the command', async () => (await runningCall(turn.id)) === 'call_paused', 60_000)
    const lost = await pausePastLease(0, async () => {
      await waitFor('node 1 takes the turn over and asks the model about the cut call', async () => (asked.get(2) ?? 0) >= 1, 60_000)
    })
    await waitFor('node 0 joins again as a new node', async () => (await nodeId(0)) !== lost, 60_000)
    next.open()
    const done = await settled(c, sessionId, turn.id)
    const items = await allItems(c, sessionId)
    assert.equal(done.status, 'completed', `${JSON.stringify(done)}\n${render(items)}`)
    assert.deepEqual(Object.fromEntries(asked), { 1: 1, 2: 1 }, 'one ask a step: the woken node asked no more')
    assert.match(cutResult ?? '', /whether it finished is unknown/, 'the model learns the call was cut, not its stale result')
    const mine = items.filter((i) => i.turn_id === turn.id)
    assert.deepEqual(mine.filter((i) => i.detail.event === 'agent.tool_result').map((i) => i.detail.toolCallId), ['call_paused'], `one result for the call\n${render(items)}`)
    assert.deepEqual(messages(mine), ['after the pause'], render(items))
  })
})
