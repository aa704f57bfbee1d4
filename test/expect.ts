import assert from 'node:assert/strict'
import type { LightMyRequestResponse } from 'fastify'
import type { Warren } from './harness.ts'

export type ErrorBody = { code: string; message: string; request_id: string }

/**
 * Asserts a refusal to the letter of the specification: the status, `error` as the only key,
 * exactly code/message/request_id inside it, and request_id equal to the x-request-id header.
 */
export function expectError(res: LightMyRequestResponse, status: number, code: string): ErrorBody {
  assert.equal(res.statusCode, status, `expected ${status} ${code}, got ${res.statusCode}: ${res.body}`)
  assert.match(String(res.headers['content-type']), /^application\/json/)
  const body = res.json() as { error: ErrorBody }
  assert.deepEqual(Object.keys(body), ['error'], `error body has other keys: ${res.body}`)
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'request_id'])
  assert.equal(body.error.code, code)
  assert.equal(typeof body.error.message, 'string')
  assert.ok(body.error.message.length > 0, 'message is empty')
  assert.equal(typeof body.error.request_id, 'string')
  assert.ok(body.error.request_id.length > 0)
  assert.equal(body.error.request_id, res.headers['x-request-id'])
  return body.error
}

/** The four rate-limit headers as numbers (resource as text); asserts each is present. */
export function rateHeaders(res: LightMyRequestResponse): { limit: number; remaining: number; reset: number; resource: string } {
  const h = res.headers
  for (const name of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'x-ratelimit-resource']) {
    assert.ok(h[name] !== undefined, `${name} missing on ${res.statusCode} ${res.body}`)
  }
  for (const name of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']) {
    assert.match(String(h[name]), /^\d+$/, `${name} is not a whole number: ${h[name]}`)
  }
  return {
    limit: Number(h['x-ratelimit-limit']),
    remaining: Number(h['x-ratelimit-remaining']),
    reset: Number(h['x-ratelimit-reset']),
    resource: String(h['x-ratelimit-resource']),
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Every token id the calling token's organization lists, walking all pages. */
export async function listTokenIds(w: Warren, token?: string): Promise<string[]> {
  const ids: string[] = []
  let after = ''
  for (;;) {
    const res = await w.inject({ method: 'GET', url: `/v1/tokens?limit=100${after ? `&after=${after}` : ''}`, token })
    assert.equal(res.statusCode, 200, res.body)
    const page = res.json() as { data: { id: string }[]; has_more: boolean; last_id: string }
    ids.push(...page.data.map((t) => t.id))
    if (!page.has_more) return ids
    after = page.last_id
  }
}
