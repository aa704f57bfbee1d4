import assert from 'node:assert/strict'
import type { LightMyRequestResponse } from 'fastify'
import type { Warren } from './harness.ts'
import type { FakeModelServer } from './fakes/model-server.ts'
import type { TransientEvent } from '../src/events/event-bus.ts'
import { waitFor } from './fixtures.ts'

/** Helpers of test/turns.queue.test.ts and test/turns.provider.test.ts. */

/** Rate limits out of the way: these tests create sessions and poll freely. */
export const NO_RATE_LIMITS = { WARREN_RATE_SESSIONS_PER_MIN: '100000', WARREN_RATE_GENERAL_PER_MIN: '1000000' }

export type Org = { token: string; orgId: string }
export type Provider = 'openai' | 'anthropic' | 'openai_compatible'

export type TurnJson = {
  object: 'turn'
  id: string
  session_id: string
  status: 'working' | 'completed' | 'failed' | 'cancelled'
  created_at: number
  started_at: number | null
  completed_at: number | null
  artifacts: string | null
  artifacts_skipped: unknown[]
  subagent_id: null
  error: { code: string; message: string } | null
}
export const TURN_KEYS = ['artifacts', 'artifacts_skipped', 'completed_at', 'created_at', 'error', 'id', 'object', 'session_id', 'started_at', 'status', 'subagent_id']

export type ItemJson = { object: 'item'; id: string; type: string; turn_id: string | null; created_at: number; detail: { event: string; [k: string]: unknown } }

/** A client for one organization. */
export function client(w: Warren, org: Org) {
  const call = (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown): Promise<LightMyRequestResponse> =>
    w.inject({ method, url, token: org.token, ...(payload !== undefined ? { payload: payload as never } : {}) })
  const c = {
    call,
    async connect(fake: FakeModelServer, provider: Provider, extra: Record<string, unknown> = {}): Promise<string> {
      const res = await call('POST', '/v1/model-credentials', { provider, api_key: fake.key, base_url: fake.url, models: ['m1'], ...extra })
      assert.equal(res.statusCode, 201, res.body)
      return res.json().id
    },
    async session(payload: Record<string, unknown> = {}): Promise<string> {
      const res = await call('POST', '/v1/sessions', payload)
      assert.equal(res.statusCode, 201, res.body)
      return res.json().id
    },
    getSession: async (id: string) => {
      const res = await call('GET', `/v1/sessions/${id}`)
      assert.equal(res.statusCode, 200, res.body)
      return res.json()
    },
    send: (sid: string, payload: Record<string, unknown>) => call('POST', `/v1/sessions/${sid}/messages`, payload),
    /** Sends and expects a 202, returning the Turn. */
    async accept(sid: string, text: string): Promise<TurnJson> {
      const res = await c.send(sid, { text })
      assert.equal(res.statusCode, 202, res.body)
      return res.json()
    },
    async turn(sid: string, tid: string): Promise<TurnJson> {
      const res = await call('GET', `/v1/sessions/${sid}/turns/${tid}`)
      assert.equal(res.statusCode, 200, res.body)
      return res.json()
    },
    async turns(sid: string): Promise<TurnJson[]> {
      const res = await call('GET', `/v1/sessions/${sid}/turns?order=asc&limit=100`)
      assert.equal(res.statusCode, 200, res.body)
      return res.json().data
    },
    /** The turn once it has settled and its files' publication has ended (the last move a turn makes). */
    settled: (sid: string, tid: string, ms = 20_000): Promise<TurnJson> =>
      waitFor(`turn ${tid} settles`, async () => {
        const t = await c.turn(sid, tid)
        return t.status !== 'working' && t.artifacts !== 'pending' && t
      }, ms),
    cancel: (sid: string, tid: string) => call('POST', `/v1/sessions/${sid}/turns/${tid}/cancel`),
    /** Every item of the session, oldest first, across pages. */
    async items(sid: string): Promise<ItemJson[]> {
      const out: ItemJson[] = []
      let after = ''
      for (;;) {
        const res = await call('GET', `/v1/sessions/${sid}/items?order=asc&limit=100${after ? `&after=${after}` : ''}`)
        assert.equal(res.statusCode, 200, res.body)
        const page = res.json()
        out.push(...page.data)
        if (!page.has_more) return out
        after = page.last_id
      }
    },
  }
  return c
}

export async function newOrg(w: Warren): Promise<Org> {
  const m = await w.mint()
  return { token: m.token, orgId: m.orgId }
}

/** The details of one event name among the items, in order. */
export const details = (items: ItemJson[], event: string) => items.filter((i) => i.detail.event === event).map((i) => i.detail)

export const seqOf = (itemId: string): number => {
  const m = /(\d+)$/.exec(itemId)
  assert.ok(m, `item id ${itemId} carries no sequence number`)
  return Number(m[1])
}

/** The session's status signals and turn outcomes from the event log (they are not items). */
export async function signals(w: Warren, sessionId: string): Promise<{ type: string; payload: Record<string, unknown>; turnId: string | null }[]> {
  const rows = await w.store.db.selectFrom('events').selectAll().where('session_id', '=', sessionId).orderBy('seq').execute()
  return rows
    .filter((r) => r.type.startsWith('session.') || r.type === 'turn.completed' || r.type === 'turn.failed')
    .map((r) => ({ type: r.type, payload: JSON.parse(r.payload), turnId: r.turn_id }))
}

/** Transient events of one session, collected from the bus until `stop()`. */
export function collectTransient(w: Warren, sessionId: string): { events: TransientEvent[]; stop: () => void } {
  const events: TransientEvent[] = []
  const stop = w.bus.subscribeTransient((e) => {
    if (e.sessionId === sessionId) events.push(e)
  })
  return { events, stop }
}

/** The model steps recorded for a turn, in order. */
export async function modelSteps(w: Warren, turnId: string) {
  const rows = await w.store.db.selectFrom('model_steps').selectAll().where('turn_id', '=', turnId).orderBy('step').execute()
  return rows.map((r) => ({ step: Number(r.step), model: r.model, model_credential_id: r.model_credential_id, input_tokens: Number(r.input_tokens), output_tokens: Number(r.output_tokens) }))
}

/**
 * Runs one turn whose agent makes one bash call (`timeout_seconds` when given); answers the turn
 * what the command printed (with the tool's `[exit code: …]` line), and whether the call failed.
 */
export async function runBash(c: ReturnType<typeof client>, model: FakeModelServer, sid: string, command: string, opts: { timeoutS?: number; waitMs?: number } = {}) {
  const before = model.modelRequests.length
  model.script({ toolCalls: [{ name: 'bash', args: { command, ...(opts.timeoutS ? { timeout_seconds: opts.timeoutS } : {}) } }] }, { text: 'Done.' })
  const turn = await c.accept(sid, 'run it')
  const settled = await c.settled(sid, turn.id, opts.waitMs ?? 180_000)
  // Each request carries the whole conversation: this turn's command is the last result of its last request.
  const last = model.modelRequests.slice(before).at(-1)?.toolResults.at(-1)?.content ?? ''
  // A failed call's result reaches the model as {"error": output}.
  const failed = last.startsWith('{"error":')
  return { turn: settled, output: failed ? (JSON.parse(last) as { error: string }).error : last, failed }
}
