// Several nodes on one PostgreSQL behave as one service: a session's work happens on the node
// that holds its lease whichever node a request reaches, a node starting never takes what a live
// node holds, a node stopping hands its sessions over, and a node that would share its host's
// sandbox resources with a live one is refused. (Killed nodes: test/cluster.test.ts.)
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { onPostgres, startWarren, type Warren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { client, newOrg, NO_RATE_LIMITS } from './turns.helpers.ts'
import { hostWorkspace } from './host-workspace.ts'
import { agentRuns, hostRequest, openWebSocket, startSiteCommand } from './previews.helpers.ts'
import { randomText } from '../src/shared/ids.ts'
import { removeSharedStore } from './restart-store.ts'
import { LostOwnership } from '../src/nodes/ownership.store.ts'

const env = { ...NO_RATE_LIMITS, WARREN_NODE_LEASE_MS: '2000' }

const ownerOf = async (w: Warren, sid: string) => (await w.store.db.selectFrom('sessions').select('owner_node').where('id', '=', sid).executeTakeFirstOrThrow()).owner_node
const stateOf = async (w: Warren, sid: string) => JSON.parse((await w.store.db.selectFrom('sessions').select('environment').where('id', '=', sid).executeTakeFirstOrThrow()).environment).state

onPostgres('nodes on one store', () => {
  let fake: FakeModelServer
  let a: Warren
  let b: Warren
  let aClosed = false
  let bBase = ''
  // Given to both, so that neither drops the store on close: the last test stops A first.
  const pgSchema = `t_${randomText(12)}`
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    a = await startWarren('postgres', { env, pgSchema })
    b = await startWarren('postgres', { env, pgSchema })
    // Listening, each node has an address the other passes requests on to.
    await a.listen()
    bBase = await b.listen()
  })
  after(async () => {
    await b?.close()
    if (!aClosed) await a?.close()
    await fake.close()
    await removeSharedStore('postgres', fs.mkdtempSync(path.join(os.tmpdir(), 'warren-nodes-')), pgSchema)
  })

  it('runs a session’s turns on the node that created it, whichever node the message reaches, and calls the model once a step', async () => {
    const org = await newOrg(a)
    const viaA = client(a, org)
    const viaB = client(b, org)
    await viaA.connect(fake, 'openai')
    const sid = await viaA.session()
    assert.equal(await ownerOf(a, sid), a.node.id)
    await waitFor('the workspace runs on A', async () => (await stateOf(a, sid)) === 'running', 60_000)
    const base = fake.modelRequests.length
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'echo from-a > where.txt' } }] }, { text: 'Done.' })
    const turn = await viaB.accept(sid, 'write where you are')
    const done = await viaB.settled(sid, turn.id, 60_000)
    assert.equal(done.status, 'completed', JSON.stringify(done))
    assert.equal(fake.modelRequests.length - base, 2, 'one model call per step, by one node')
    assert.equal(fs.readFileSync(path.join(hostWorkspace(a, sid), 'where.txt'), 'utf8'), 'from-a\n', 'the tool ran in the owner’s workspace')
    assert.equal(fs.existsSync(hostWorkspace(b, sid)), false, 'the other node never brought a workspace up')
    assert.equal(await ownerOf(a, sid), a.node.id)
  })

  it('a node started beside a live one leaves its workspaces and usage alone', async () => {
    const org = await newOrg(a)
    const viaA = client(a, org)
    await viaA.connect(fake, 'openai')
    const sid = await viaA.session()
    await waitFor('the workspace runs on A', async () => (await stateOf(a, sid)) === 'running', 60_000)
    const c = await startWarren('postgres', { env, pgSchema })
    try {
      assert.equal(await stateOf(a, sid), 'running')
      const open = await a.store.db.selectFrom('usage_intervals').selectAll().where('session_id', '=', sid).execute()
      assert.deepEqual(open.map((i) => [i.ended_at, i.needs_review]), [[null, 0]], 'A’s interval is still open and not under review')
      assert.equal(await ownerOf(a, sid), a.node.id)
      assert.deepEqual(new Set(c.node.peers().filter((p) => p.live).map((p) => p.id)), new Set([a.node.id, b.node.id, c.node.id]))
    } finally {
      await c.close()
    }
  })

  it('cancels, through another node, a turn running on its owner', async () => {
    const org = await newOrg(a)
    const viaA = client(a, org)
    const viaB = client(b, org)
    await viaA.connect(fake, 'openai')
    const sid = await viaA.session()
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'touch started; sleep 600' } }] })
    const turn = await viaA.accept(sid, 'wait a long time')
    await waitFor('the command runs on A', async () => fs.existsSync(path.join(hostWorkspace(a, sid), 'started')), 60_000)
    const res = await viaB.cancel(sid, turn.id)
    assert.equal(res.statusCode, 200, res.body)
    assert.equal(res.json().status, 'cancelled')
  })

  it('deletes, through another node, a session whose workspace lives on its owner', async () => {
    const org = await newOrg(a)
    const viaA = client(a, org)
    const viaB = client(b, org)
    await viaA.connect(fake, 'openai')
    const sid = await viaA.session()
    await waitFor('the workspace runs on A', async () => fs.existsSync(hostWorkspace(a, sid)) && (await stateOf(a, sid)) === 'running', 60_000)
    assert.equal((await viaB.call('DELETE', `/v1/sessions/${sid}`)).statusCode, 200)
    await waitFor('A removes the workspace', async () => !fs.existsSync(hostWorkspace(a, sid)), 30_000)
  })

  it('passes a request that acts on the owner’s workspace on to the owner: files land there, never in a second sandbox', async () => {
    const org = await newOrg(a)
    const viaA = client(a, org)
    const viaB = client(b, org)
    await viaA.connect(fake, 'openai')
    const sid = await viaA.session()
    const put = (path: string, text: string) => ({ files: [{ path, content: Buffer.from(text).toString('base64') }] })
    const res = await viaB.call('POST', `/v1/sessions/${sid}/files`, put('up.txt', 'through b'))
    assert.equal(res.statusCode, 200, res.body)
    assert.deepEqual(res.json().data, [{ path: 'up.txt', size_bytes: 9 }])
    assert.equal(fs.readFileSync(path.join(hostWorkspace(a, sid), 'up.txt'), 'utf8'), 'through b')
    // A message with files: the files go in on A, the turn is accepted once, and runs on A.
    fake.script({ text: 'Seen.' })
    const sent = await viaB.send(sid, { text: 'here is a file', ...put('msg.txt', 'with message') })
    assert.equal(sent.statusCode, 202, sent.body)
    assert.equal((await viaB.settled(sid, sent.json().id, 60_000)).status, 'completed')
    assert.equal(fs.readFileSync(path.join(hostWorkspace(a, sid), 'msg.txt'), 'utf8'), 'with message')
    assert.equal((await viaA.turns(sid)).length, 1)
    assert.equal(fs.existsSync(hostWorkspace(b, sid)), false, 'no second sandbox came up on B')
    // A caller cannot pose as a node: a made-up secret is passed on like any request, not served as one.
    const posed = await b.inject({ method: 'POST', url: `/v1/sessions/${sid}/files`, token: org.token, headers: { 'x-warren-node-secret': 'guess' }, payload: put('posed.txt', 'x') })
    assert.equal(posed.statusCode, 200, posed.body)
    assert.equal(fs.existsSync(hostWorkspace(b, sid)), false)
  })

  it('never brings a workspace up on a node that does not own its session: acquire there refuses, whoever asks', async () => {
    const org = await newOrg(a)
    const viaA = client(a, org)
    await viaA.connect(fake, 'openai')
    const sid = await viaA.session()
    assert.equal(await ownerOf(a, sid), a.node.id)
    await assert.rejects(b.workspaces.acquire(sid), (err: Error) => err instanceof LostOwnership && err.message.includes(a.node.id))
    assert.equal(await b.workspaces.live(sid), null)
    assert.equal(fs.existsSync(hostWorkspace(b, sid)), false, 'no second sandbox came up on B')
    assert.equal(await ownerOf(a, sid), a.node.id, 'B took nothing')
  })

  it('serves a preview through any node: publishing, pages and WebSockets reach the owner’s sandbox, and no node secret reaches the site', async () => {
    const org = await newOrg(a)
    const viaA = client(a, org)
    const viaB = client(b, org)
    await viaA.connect(fake, 'openai')
    const sid = await viaA.session()
    assert.equal((await agentRuns(viaA, fake, sid, startSiteCommand(3000))).status, 'completed')
    const published = await viaB.call('POST', `/v1/sessions/${sid}/preview`, {})
    assert.equal(published.statusCode, 200, published.body)
    assert.equal(published.json().port, 3000)
    const host = `${published.json().subdomain}.preview.localhost`
    const page = await hostRequest(bBase, host, '/')
    assert.equal(page.status, 200, page.body)
    assert.match(page.body, /Hello from site/)
    const echo = JSON.parse((await hostRequest(bBase, host, '/echo?x=1', { method: 'POST', body: 'hi' })).body)
    assert.deepEqual([echo.method, echo.url, echo.body], ['POST', '/echo?x=1', 'hi'])
    assert.equal(echo.headers['x-warren-node-secret'], undefined, 'a node secret never reaches a workspace')
    const ws = await openWebSocket(bBase, host, '/ws')
    assert.equal(ws.status, 101, ws.head)
    ws.send('through b')
    assert.equal(await ws.next(), 'echo: through b')
    ws.close()
    assert.equal(fs.existsSync(hostWorkspace(b, sid)), false)
  })

  // Last: it stops A.
  it('a node that stops hands its sessions over: a turn parked on an approval goes on, answered, on another node', async () => {
    const org = await newOrg(a)
    const viaA = client(a, org)
    const viaB = client(b, org)
    await viaA.connect(fake, 'openai')
    const sid = await viaA.session({ agent: { model: 'm1', approval_mode: 'ask' } })
    const base = fake.modelRequests.length
    fake.script({ toolCalls: [{ id: 'call_w1', name: 'write_file', args: { path: 'out.txt', content: 'approved' } }] }, { text: 'Written.' })
    const turn = await viaA.accept(sid, 'write a file')
    await waitFor('the approval is asked', async () => (await viaA.items(sid)).some((i) => i.detail.event === 'approval.requested'), 60_000)
    await a.close()
    aClosed = true
    await waitFor('B takes the session', async () => (await ownerOf(b, sid)) === b.node.id, 30_000)
    const res = await viaB.call('POST', `/v1/sessions/${sid}/approvals/call_w1`, { approved: true })
    assert.equal(res.statusCode, 200, res.body)
    const done = await viaB.settled(sid, turn.id, 60_000)
    assert.equal(done.status, 'completed', JSON.stringify(done))
    assert.equal(fake.modelRequests.length - base, 2, 'the model was asked once for each step')
    assert.equal(fs.readFileSync(path.join(hostWorkspace(b, sid), 'out.txt'), 'utf8'), 'approved')
  })
})

it('refuses a second process on one SQLite store, saying which process holds it', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-nodes-'))
  const first = await startWarren('sqlite', { dataDir })
  try {
    await assert.rejects(startWarren('sqlite', { dataDir }), new RegExp(`pid ${process.pid}.*one process serves a SQLite store`))
  } finally {
    await first.close()
    await removeSharedStore('sqlite', dataDir, '')
  }
})
