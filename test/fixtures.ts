import assert from 'node:assert/strict'
import type { Warren } from './harness.ts'

/** Connects a model for the calling organization without asking any provider (models given). */
export async function connectModel(w: Warren, models = ['gpt-test'], token?: string, key = 'sk-test-1'): Promise<string> {
  const res = await w.inject({ method: 'POST', url: '/v1/model-credentials', token, payload: { provider: 'openai', api_key: key, models } })
  assert.ok(res.statusCode === 201 || res.statusCode === 200, res.body)
  return res.json().id
}
