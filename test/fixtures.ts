import assert from 'node:assert/strict'
import type { Warren } from './harness.ts'

/** Connects a model for the calling organization without asking any provider (models given). */
export async function connectModel(w: Warren, models = ['gpt-test'], token?: string, key = 'sk-test-1'): Promise<string> {
  const res = await w.inject({ method: 'POST', url: '/v1/model-credentials', token, payload: { provider: 'openai', api_key: key, models } })
  assert.ok(res.statusCode === 201 || res.statusCode === 200, res.body)
  return res.json().id
}

/** Polls until `check` returns a value, for at most `ms`; time-based rules are tested through the knobs, not sleeps. */
export async function waitFor<T>(what: string, check: () => Promise<T | undefined | null | false>, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const v = await check()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

type Item = { type: string; detail: { event: string; [k: string]: unknown } }

export async function items(w: Warren, id: string): Promise<Item[]> {
  const res = await w.inject({ method: 'GET', url: `/v1/sessions/${id}/items?order=asc&limit=100` })
  assert.equal(res.statusCode, 200, res.body)
  return res.json().data
}

export const hasEvent = (w: Warren, id: string, event: string, count = 1) =>
  waitFor(`${count} × ${event} on ${id}`, async () => (await items(w, id)).filter((i) => i.detail.event === event).length >= count)

