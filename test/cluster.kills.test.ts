// Nodes killed and stopped under load (issue 15): the owner of a session SIGKILLed while a tool
// call runs and while a preview WebSocket is open through another node, and a node stopped
// gracefully while two of its turns work. Real `warren serve` child processes on one PostgreSQL
// schema (test/cluster.ts); the nodes killed are started again for the next test.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { startCluster, type Cluster } from './cluster.ts'
import { allItems, connectModel, leftOnHost, createSession, ownerIndex, render, RESTORED_NOTE, routeAcrossRestore, send, sessionWithMarker, settled, tag, type Turn } from './cluster.helpers.ts'
import { startModelServer, type FakeModelServer, type ModelRequest, type ScriptStep } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { onPostgres } from './harness.ts'
import { hostRequest, openWebSocket, startSiteCommand } from './previews.helpers.ts'
import { openSse, type Frame } from './sse-client.ts'

/** Counts the model's calls per step of one turn (a step: how many tool results the conversation holds). */
function stepCounter() {
  const asked = new Map<number, number>()
  return {
    asked,
    count(req: ModelRequest) {
      const step = req.toolResults.length
      asked.set(step, (asked.get(step) ?? 0) + 1)
      return step
    },
    shown: () => Object.fromEntries(asked),
  }
}

/** The persisted events of a stream's frames: their seq (the SSE id), in the order they came. */
const seqs = (frames: Frame[]) => frames.filter((f) => f.id !== undefined).map((f) => Number(f.id))

onPostgres('cluster: nodes killed and stopped under load', () => {
  let fake: FakeModelServer
  let c: Cluster
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    c = await startCluster({ nodes: 3 })
    await connectModel(c, 0, fake)
  })
  after(async () => {
    await c?.close()
    await fake?.close()
  })
  /** Starts whichever of these nodes a test before killed. */
  const ensureLive = async (...nodes: number[]) => {
    for (const i of nodes) if (!c.live().includes(i)) await c.start(i)
  }
  /** Until a live node other than `dead` holds the session: its index. */
  const newOwner = (sessionId: string, dead: number) =>
    waitFor(`a live node takes session ${sessionId} over`, async () => {
      const i = await ownerIndex(c, sessionId)
      return i >= 0 && i !== dead ? i + 1 : 0
    }, 60_000).then((i) => i - 1)

  it('SIGKILLed mid tool call: another node takes over, tells the model which call was cut and that the workspace was restored; a stream resumed on another node gets every event once', async () => {
    await ensureLive(0, 1, 2)
    const { sessionId, marker } = await sessionWithMarker(c, 0, fake)
    await waitFor('the workspace snapshot after the first turn', async () => (await c.query('SELECT 1 FROM {schema}.workspace_snapshots WHERE session_id = $1', [sessionId])).length === 1, 60_000)
    assert.equal(await ownerIndex(c, sessionId), 0, 'control: node 0 created the session and owns it')

    const text = `run a long command ${tag()}`
    const steps = stepCounter()
    let afterCut: ModelRequest | null = null
    let listing: string | null = null
    routeAcrossRestore(fake, text, (req): ScriptStep => {
      // The conversation already holds the first turn's tool result: this turn's steps are 1 to 3.
      const step = steps.count(req)
      if (step === 1) return { toolCalls: [{ id: 'call_long', name: 'bash', args: { command: 'echo partial > /workspace/partial.txt; sleep 30; echo finished' } }] }
      if (step === 2) {
        afterCut = req
        return { toolCalls: [{ id: 'call_look', name: 'bash', args: { command: 'ls /workspace' } }] }
      }
      listing = req.toolResults.at(-1)!.content
      return { text: 'noted the cut call' }
    })
    const before = await openSse(c.nodes[0]!.service.url, `/v1/sessions/${sessionId}/events`, { token: c.token, lastEventId: '0' })
    assert.equal(before.status, 200, before.body)
    const turn = await send(c, 0, sessionId, text)
    await before.until('the long command starts on node 0', (events) => events.some((f) => f.event === 'agent.tool_call' && f.data?.payload?.toolCallId === 'call_long'), 60_000)
    await waitFor('the command is running', async () => (await c.query<{ running_call: string | null }>('SELECT running_call FROM {schema}.turns WHERE id = $1', [turn.id]))[0]?.running_call === 'call_long', 30_000)
    await c.kill(0, 'SIGKILL')
    // The stream of the node that died ends (its socket closes), it does not hang.
    await waitFor('the stream from the killed node ends', async () => before.isEnded(), 30_000)
    const lastSeen = seqs(before.frames).at(-1)!
    const resumed = await openSse(c.nodes[1]!.service.url, `/v1/sessions/${sessionId}/events`, { token: c.token, lastEventId: String(lastSeen) })
    assert.equal(resumed.status, 200, resumed.body)

    const done = await settled(c, sessionId, turn.id)
    assert.equal(done.status, 'completed', JSON.stringify(done))
    await resumed.until('the resumed stream sees the turn end', (events) => events.some((f) => f.event === 'turn.ended' && f.data?.payload?.turnId === turn.id), 30_000)
    assert.notEqual(await newOwner(sessionId, 0), 0)

    assert.deepEqual(steps.shown(), { 1: 1, 2: 1, 3: 1 }, 'one model call a step, across the kill')
    const cut = afterCut as ModelRequest | null
    assert.ok(cut, 'the model was asked after the cut call')
    const result = cut.toolResults.find((r) => r.toolCallId === 'call_long')
    assert.ok(result, `the cut call has a result the model sees: ${JSON.stringify(cut.toolResults)}`)
    assert.match(result.content, /whether it finished is unknown/, 'the result of the cut call says it was cut')
    assert.ok(cut.lastUserText?.startsWith(RESTORED_NOTE) && /restored to its state at/.test(cut.lastUserText), `the step that learns of the cut call is also told the workspace was restored: ${JSON.stringify(cut.lastUserText)}`)
    // What the note says holds: the snapshot's file is there, the cut call's is not.
    assert.ok(listing !== null && (listing as string).includes('kept.txt') && !(listing as string).includes('partial.txt'), `the restored workspace: ${JSON.stringify(listing)}`)

    // Everything persisted, in order, once: what the first stream saw and the resumed one got is
    // exactly what a full replay from a third node shows.
    const full = await openSse(c.nodes[2]!.service.url, `/v1/sessions/${sessionId}/events`, { token: c.token, lastEventId: '0' })
    await full.until('the full replay reaches the turn end', (events) => events.some((f) => f.event === 'turn.ended' && f.data?.payload?.turnId === turn.id), 30_000)
    // Up to the turn's end: what comes after it (a pause, say) may reach one stream and not yet the other.
    const end = Number(full.events().find((f) => f.event === 'turn.ended' && f.data?.payload?.turnId === turn.id)!.id)
    const upToEnd = (list: number[]) => list.filter((seq) => seq <= end)
    const seenAcross = upToEnd([...seqs(before.frames), ...seqs(resumed.frames)])
    resumed.close()
    full.close()
    const replay = upToEnd(seqs(full.frames))
    assert.deepEqual(seenAcross, replay, 'the stream before the kill and the one resumed on another node together hold every persisted event once, in order')
    assert.deepEqual(replay, [...new Set(replay)].sort((a, b) => a - b), 'seqs rise and never repeat')
    const items = await allItems(c, sessionId)
    const mine = items.filter((i) => i.turn_id === turn.id)
    for (const event of ['agent.tool_call', 'agent.tool_result']) {
      assert.deepEqual(mine.filter((i) => i.detail.event === event).map((i) => i.detail.toolCallId), ['call_long', 'call_look'], `${event} once a call\n${render(items)}`)
    }
    assert.equal(mine.filter((i) => i.detail.event === 'agent.message').length, 1, render(items))
  })

  it('SIGKILLed while a preview WebSocket is open through another node: the socket closes, the preview stays published, and once the agent serves again a new socket through any node reaches the workspace', async () => {
    await ensureLive(1, 2)
    const sessionId = await createSession(c, 1)
    const serve = `serve the site ${tag()}`
    const serveAgain = `serve the site again ${tag()}`
    for (const text of [serve, serveAgain]) {
      // Each turn: one step starts the site in the background, the next one ends the turn.
      let asked = 0
      routeAcrossRestore(fake, text, () => (asked++ === 0 ? { toolCalls: [{ name: 'bash', args: { command: startSiteCommand(3000) } }] } : { text: 'serving' }))
    }
    const started = await settled(c, sessionId, (await send(c, 1, sessionId, serve)).id)
    assert.equal(started.status, 'completed', JSON.stringify(started))
    const published = await c.on(2, 'POST', `/v1/sessions/${sessionId}/preview`, {})
    assert.equal(published.status, 200, published.text)
    const host = new URL(published.body.url as string).host
    const through = (i: number) => c.nodes[i]!.service.url

    const ws = await openWebSocket(through(2), host, '/ws')
    assert.equal(ws.status, 101, ws.head)
    ws.send('before')
    assert.equal(await ws.next(), 'echo: before')
    assert.equal(await ownerIndex(c, sessionId), 1, 'control: node 1 runs the workspace, node 2 carries the socket')
    const [{ owner_node: deadId }] = (await c.query<{ owner_node: string }>('SELECT owner_node FROM {schema}.sessions WHERE id = $1', [sessionId])) as [{ owner_node: string }]
    await c.kill(1, 'SIGKILL')
    // The owner's death ends the socket it served; node 2 must not leave its client hanging.
    let closed = false
    void ws.closed.then(() => (closed = true))
    await waitFor('the WebSocket through node 2 closes', async () => closed, 30_000)

    await ensureLive(0)
    // Taken over and let go (nothing of it runs any more): the first node a request reaches claims it.
    await waitFor('the dead node loses the session', async () => (await c.query<{ owner_node: string | null }>('SELECT owner_node FROM {schema}.sessions WHERE id = $1', [sessionId]))[0]?.owner_node !== deadId, 60_000)
    // Processes do not survive their node: the preview is still published, but nothing serves it
    // until the agent starts the site again. Through every node the answer is the service's own 502.
    const session = await c.api('GET', `/v1/sessions/${sessionId}`)
    assert.equal(session.body.preview.published_url, published.body.url, 'the preview is still published')
    for (const i of c.live()) {
      const page = await hostRequest(through(i), host, '/')
      assert.equal(page.status, 502, `node ${i}: ${page.status} ${page.body.slice(0, 300)}`)
    }
    const again = await settled(c, sessionId, (await send(c, 2, sessionId, serveAgain)).id)
    assert.equal(again.status, 'completed', JSON.stringify(again))
    for (const i of c.live()) {
      const next = await openWebSocket(through(i), host, '/ws')
      assert.equal(next.status, 101, `node ${i}: ${next.head}`)
      next.send(`after through ${i}`)
      assert.equal(await next.next(), `echo: after through ${i}`)
      next.close()
    }
  })

  it('a graceful stop of a node with a turn mid model stream and one mid bash call: its sessions move to the others and both turns complete', async () => {
    await ensureLive(0, 1, 2)
    const streaming = `stream slowly ${tag()}`
    const running = `run a slow command ${tag()}`
    const asked = { streaming: stepCounter(), running: stepCounter() }
    let streams = 0
    routeAcrossRestore(fake, streaming, (req) => {
      asked.streaming.count(req)
      // The first ask is still streaming when its node stops; the next node's ask is answered.
      return streams++ === 0 ? { hang: true, text: 'thinking' } : { text: 'streamed' }
    })
    routeAcrossRestore(fake, running, (req) => (asked.running.count(req) === 0 ? { toolCalls: [{ id: 'call_slow', name: 'bash', args: { command: 'sleep 30; echo slow-done' } }] } : { text: 'ran' }))
    const a = await createSession(c, 2)
    const b = await createSession(c, 2)
    const turnA = await send(c, 2, a, streaming)
    const turnB = await send(c, 2, b, running)
    await waitFor('node 2 streams the first turn', async () => streams >= 1, 60_000)
    await waitFor('node 2 runs the slow command', async () => (await c.query<{ running_call: string | null }>('SELECT running_call FROM {schema}.turns WHERE id = $1', [turnB.id]))[0]?.running_call === 'call_slow', 60_000)

    const stopped = await c.kill(2, 'SIGTERM')
    assert.deepEqual(stopped, { code: 0, signal: null }, 'the stop finishes on its own, within the harness limit, and exits 0')
    assert.deepEqual(leftOnHost(c.nodes[2]!.prefix), [], 'a clean stop leaves nothing of its prefix on the host')

    const done: Record<string, Turn> = {}
    for (const [sessionId, turn] of [[a, turnA], [b, turnB]] as const) done[sessionId] = await settled(c, sessionId, turn.id)
    for (const [sessionId, turn] of [[a, turnA], [b, turnB]] as const) {
      assert.equal(done[sessionId]!.status, 'completed', `${JSON.stringify(done[sessionId])}\n${render(await allItems(c, sessionId))}`)
      assert.ok([0, 1].includes(await ownerIndex(c, sessionId)), `session ${sessionId} of turn ${turn.id} moved to a live node`)
    }
    assert.deepEqual(asked.streaming.shown(), { 0: 2 }, 'the stream cut by the stop is asked again once, by the node that took over')
    assert.deepEqual(asked.running.shown(), { 0: 1, 1: 1 }, `one model call a step for the turn whose command the stop cut\n${render(await allItems(c, b))}`)
    await c.start(2)
  })

  // Node starts are what take time here, and a loaded machine slows each several times over: the
  // rounds get the time they need rather than the suite's default limit.
  it('a node stopped as soon as it says it listens exits 0 and leaves nothing of its prefix behind', { timeout: 300_000 }, async () => {
    await ensureLive(1)
    // Each start fills the warm pool (cgroups and parked shells) while the stop signal comes.
    for (let round = 0; round < 3; round++) {
      await ensureLive(2)
      assert.deepEqual(await c.kill(2, 'SIGTERM'), { code: 0, signal: null }, `round ${round}: the stop ran its course`)
      assert.deepEqual(leftOnHost(c.nodes[2]!.prefix), [], `round ${round}`)
    }
  })
})
