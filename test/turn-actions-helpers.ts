/**
 * Helpers shared by test/turn-approvals.test.ts and test/turn-functions.test.ts: each test gets
 * its own organization, its own fake model provider (so one test's script never leaks into
 * another's) and talks to the service through HTTP only, except where the specification puts a
 * fact in the event log and nowhere else (the webhook signals).
 */
import assert from 'node:assert/strict'
import type { TestContext } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import type { Warren } from './harness.ts'
import { startModelServer, type FakeModelServer, type ModelRequest, type ToolResult } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'

/** Polling goes through HTTP: lift the rate limits so that the polls never meet them. */
export const ACTIONS_ENV = { WARREN_RATE_GENERAL_PER_MIN: '1000000', WARREN_RATE_SESSIONS_PER_MIN: '10000', WARREN_PROVIDER_RETRY_DELAYS_MS: 'none' }

export type Detail = { event: string; [k: string]: unknown }
export type Item = { object: string; id: string; type: string; turn_id: string | null; created_at: number; detail: Detail }

export const b64 = (s: string) => Buffer.from(s).toString('base64')

export type Org = {
  w: Warren
  fake: FakeModelServer
  token: string
  orgId: string
  credentialId: string
  /** Sessions created through createSession, deleted when the test ends. */
  sessions: string[]
  call(method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown): Promise<LightMyRequestResponse>
}

/**
 * A fresh organization whose one (default) model connection is a fresh fake provider speaking
 * Anthropic's wire (the wire that flags error tool results), serving model `m1`.
 */
export async function newOrg(w: Warren, t: TestContext): Promise<Org> {
  const fake = await startModelServer({ models: ['m1'] })
  const m = await w.mint()
  const call: Org['call'] = (method, url, payload) => w.inject({ method, url, token: m.token, ...(payload === undefined ? {} : { payload: payload as never }) })
  const sessions: string[] = []
  // A test that failed half-way may leave a turn running: its sessions go first (which stops
  // their turns), so that nothing calls the fake provider after it has closed.
  t.after(async () => {
    for (const id of sessions) await call('DELETE', `/v1/sessions/${id}`).catch(() => {})
    await fake.close()
  })
  const mc = await call('POST', '/v1/model-credentials', { provider: 'anthropic', api_key: fake.key, base_url: fake.url, models: ['m1'] })
  assert.equal(mc.statusCode, 201, mc.body)
  return { w, fake, token: m.token, orgId: m.orgId, credentialId: mc.json().id, call, sessions }
}

/**
 * Creates a session and, unless told otherwise, waits for its workspace to come up
 * (`sandbox.created`): the tests of one behaviour then do not also race the workspace's start
 * against the turn (a test of its own covers that race).
 */
export async function createSession(org: Org, payload: object = {}, opts: { waitForWorkspace?: boolean } = {}): Promise<{ id: string; [k: string]: unknown }> {
  const res = await org.call('POST', '/v1/sessions', payload)
  assert.equal(res.statusCode, 201, res.body)
  const id: string = res.json().id
  org.sessions.push(id)
  if (opts.waitForWorkspace !== false) await waitForEvent(org, id, 'sandbox.created')
  return res.json()
}

export async function getSession(org: Org, id: string): Promise<any> {
  const res = await org.call('GET', `/v1/sessions/${id}`)
  assert.equal(res.statusCode, 200, res.body)
  return res.json()
}

export async function send(org: Org, sessionId: string, text: string): Promise<{ id: string; status: string }> {
  const res = await org.call('POST', `/v1/sessions/${sessionId}/messages`, { text })
  assert.equal(res.statusCode, 202, res.body)
  return res.json()
}

export async function getTurn(org: Org, sessionId: string, turnId: string): Promise<any> {
  const res = await org.call('GET', `/v1/sessions/${sessionId}/turns/${turnId}`)
  assert.equal(res.statusCode, 200, res.body)
  return res.json()
}

/** Waits until the turn has settled and its files' publication has ended, and returns it. */
export const settledTurn = (org: Org, sessionId: string, turnId: string, ms?: number) =>
  waitFor(`turn ${turnId} settles`, async () => {
    const t = await getTurn(org, sessionId, turnId)
    return t.status !== 'working' && t.artifacts !== 'pending' && t
  }, ms)

export async function itemsOf(org: Org, sessionId: string): Promise<Item[]> {
  const res = await org.call('GET', `/v1/sessions/${sessionId}/items?order=asc&limit=100`)
  assert.equal(res.statusCode, 200, res.body)
  const page = res.json()
  assert.equal(page.has_more, false, 'the test expects every item on one page')
  return page.data
}

export const details = async (org: Org, sessionId: string, event?: string): Promise<Detail[]> =>
  (await itemsOf(org, sessionId)).map((i) => i.detail).filter((d) => event === undefined || d.event === event)

/** Waits for an item with this event (and matching `where`), returning its detail. */
export const waitForEvent = (org: Org, sessionId: string, event: string, where: (d: Detail) => boolean = () => true, ms?: number) =>
  waitFor(`${event} on ${sessionId}`, async () => (await details(org, sessionId, event)).find(where), ms)

/** The session's status, polled until it equals `status`. */
export const waitForStatus = (org: Org, sessionId: string, status: string, ms?: number) =>
  waitFor(`session ${sessionId} ${status}`, async () => {
    const s = await getSession(org, sessionId)
    return s.status === status && s
  }, ms)

/** The stored event log of a session (webhook signals included), payloads parsed. */
export async function signals(w: Warren, sessionId: string): Promise<{ type: string; turn_id: string | null; payload: any }[]> {
  const rows = await w.store.db.selectFrom('events').selectAll().where('session_id', '=', sessionId).orderBy('seq').execute()
  return rows.map((r) => ({ type: r.type, turn_id: r.turn_id, payload: JSON.parse(r.payload) }))
}

/** The result of one tool call in a model request (requests carry the whole conversation). */
export function resultOf(req: ModelRequest, toolCallId: string): ToolResult {
  const r = req.toolResults.find((x) => x.toolCallId === toolCallId)
  assert.ok(r, `the model request carries no result for ${toolCallId}: ${JSON.stringify(req.toolResults)}`)
  return r
}

/** Waits until nothing drives the session any more (the turn parked or settled). */
export const quiet = (w: Warren, sessionId: string) => w.runner.settled(sessionId)
