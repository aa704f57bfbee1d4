// What the cluster suites share: a fake model routed per test by its user text, and the calls a
// test makes of a cluster's nodes (a session, a message, a settled turn, the session's items).
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Cluster } from './cluster.ts'
import type { FakeModelServer, ModelRequest, ScriptStep } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'

export type Item = { id: string; type: string; turn_id: string | null; detail: { event: string; [k: string]: unknown } }
export type Turn = { id: string; status: string; artifacts: string | null; error: unknown }

export const tag = () => randomBytes(4).toString('hex')

/** Waits until `done()` holds or `ms` pass, whichever is first; never fails (a chance given, not a deadline asserted). */
export async function allowUpTo(ms: number, done: () => boolean): Promise<void> {
  const until = Date.now() + ms
  while (!done() && Date.now() < until) await sleep(50)
}

/** Answers the model calls of one test, told apart by its user text; the others' calls get an error. */
export function route(fake: FakeModelServer, text: string, answer: (req: ModelRequest) => ScriptStep | Promise<ScriptStep>): void {
  const previous = fake.fallback
  fake.fallback = (req) => (req.lastUserText === text ? answer(req) : typeof previous === 'function' ? previous(req) : { error: { status: 500, message: `no route for "${req.lastUserText}"` } })
}

/** The user text a node that took a session over adds to a working turn (the workspace's restore). */
export const RESTORED_NOTE = '[Warren] The node that ran this workspace stopped'

/** Like route, and also for the turn's later steps whose latest user text is the note of a restored workspace. */
export function routeAcrossRestore(fake: FakeModelServer, text: string, answer: (req: ModelRequest) => ScriptStep | Promise<ScriptStep>): void {
  route(fake, text, answer)
  const previous = fake.fallback
  fake.fallback = (req) => (req.lastUserText?.startsWith(RESTORED_NOTE) && req.messages.some((m) => JSON.stringify(m).includes(text)) ? answer(req) : typeof previous === 'function' ? previous(req) : { error: { status: 500 } })
}

export async function connectModel(cluster: Cluster, node: number, fake: FakeModelServer): Promise<void> {
  const res = await cluster.on(node, 'POST', '/v1/model-credentials', { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] })
  assert.equal(res.status, 201, res.text)
}

export async function createSession(cluster: Cluster, node: number, body: Record<string, unknown> = {}): Promise<string> {
  const res = await cluster.on(node, 'POST', '/v1/sessions', body)
  assert.equal(res.status, 201, res.text)
  return res.body.id
}

export async function send(cluster: Cluster, node: number, sessionId: string, text: string): Promise<Turn> {
  const res = await cluster.on(node, 'POST', `/v1/sessions/${sessionId}/messages`, { text })
  assert.equal(res.status, 202, res.text)
  return res.body
}

/** The turn once settled and its files' publication ended, asked of whichever node is next. */
export const settled = (cluster: Cluster, sessionId: string, turnId: string): Promise<Turn> =>
  waitFor(
    `turn ${turnId} settles`,
    async () => {
      const res = await cluster.api('GET', `/v1/sessions/${sessionId}/turns/${turnId}`)
      assert.equal(res.status, 200, `node ${res.node}: ${res.text}`)
      return res.body.status !== 'working' && res.body.artifacts !== 'pending' && (res.body as Turn)
    },
    120_000,
  )

/**
 * A session created on `node` whose first turn wrote a fresh marker into /workspace/kept.txt with
 * one bash call and completed: what a later turn, on this node or one that took the session over,
 * reads back to tell the workspace was kept.
 */
export async function sessionWithMarker(cluster: Cluster, node: number, fake: FakeModelServer): Promise<{ sessionId: string; marker: string }> {
  const marker = `kept-${tag()}`
  const write = `write the marker ${marker}`
  route(fake, write, (req) => (req.toolResults.length === 0 ? { toolCalls: [{ name: 'bash', args: { command: `echo ${marker} > /workspace/kept.txt` } }] } : { text: 'written' }))
  const sessionId = await createSession(cluster, node)
  const first = await settled(cluster, sessionId, (await send(cluster, node, sessionId, write)).id)
  assert.equal(first.status, 'completed', JSON.stringify(first))
  return { sessionId, marker }
}

export async function allItems(cluster: Cluster, sessionId: string): Promise<Item[]> {
  const out: Item[] = []
  let cursor = ''
  for (;;) {
    const res = await cluster.api('GET', `/v1/sessions/${sessionId}/items?order=asc&limit=100${cursor ? `&after=${cursor}` : ''}`)
    assert.equal(res.status, 200, `node ${res.node}: ${res.text}`)
    out.push(...(res.body.data as Item[]))
    if (!res.body.has_more) return out
    cursor = res.body.last_id
  }
}

export const render = (list: Item[]) => list.map((i) => `  ${i.id} ${i.turn_id ?? '-'} ${JSON.stringify(i.detail)}`).join('\n')

/** The node (its index in the cluster) that holds the session's lease now, or -1 when none of the live ones does. */
export async function ownerIndex(cluster: Cluster, sessionId: string): Promise<number> {
  const [row] = await cluster.query<{ owner_node: string | null }>('SELECT owner_node FROM {schema}.sessions WHERE id = $1', [sessionId])
  for (const i of cluster.live()) if ((await cluster.on(i, 'GET', '/v1/health')).body.node?.id === row?.owner_node) return i
  return -1
}

/** What of a node's sandbox prefix is left on this host (a node stopped cleanly leaves none). */
export { leftOnHost } from './left-on-host.ts'
