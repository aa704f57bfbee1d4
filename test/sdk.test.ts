// The SDK in sdk/: its types are generated from the description the app serves and committed; this
// fails when they drift from the running route table. Then the client is used against the service.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { useWarren } from './harness.ts'
import { generateSchema } from '../sdk/generate.ts'
import { createClient, type Session } from '../sdk/index.js'

const SCHEMA = path.join(import.meta.dirname, '..', 'sdk', 'schema.d.ts')

// The description depends on the route table, not on the store: one dialect is enough.
const w = useWarren('sqlite')

it('commits the types generated from the running route table (regenerate: node scripts/generate-sdk.ts)', async () => {
  const res = await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })
  const generated = await generateSchema(res.json())
  const committed = fs.readFileSync(SCHEMA, 'utf8')
  if (generated !== committed) {
    const a = generated.split('\n')
    const b = committed.split('\n')
    const at = a.findIndex((line, i) => line !== b[i])
    assert.fail(`sdk/schema.d.ts differs from the description at line ${at + 1}:\n  generated: ${a[at]}\n  committed: ${b[at]}\nRun node_modules/.bin/node scripts/generate-sdk.ts and commit the result.`)
  }
})

it('creates, reads and deletes a session through the client, typed, with its source and the error shape', async () => {
  const baseUrl = await w().listen()
  const client = createClient({ baseUrl, token: w().token, source: 'cli' })
  // A session runs on a model connection; this one names its models, so no provider is asked.
  const mc = await client.POST('/v1/model-credentials', { body: { provider: 'openai_compatible', api_key: 'sk-sdk', base_url: 'http://127.0.0.1:9/v1', models: ['m1'] } })
  assert.equal(mc.response.status, 201, JSON.stringify(mc.error))
  const created = await client.POST('/v1/sessions', { body: { title: 'from the sdk' } })
  assert.equal(created.response.status, 201, JSON.stringify(created.error))
  const session: Session = created.data!
  assert.equal(session.object, 'session')
  assert.equal(session.source, 'cli', 'X-Warren-Source was not sent')
  const read = await client.GET('/v1/sessions/{session_id}', { params: { path: { session_id: session.id } } })
  assert.equal(read.data?.title, 'from the sdk')
  const missing = await client.GET('/v1/sessions/{session_id}', { params: { path: { session_id: 'ses_missing' } } })
  assert.equal(missing.response.status, 404)
  assert.equal(missing.error?.error.code, 'not_found')
  const deleted = await client.DELETE('/v1/sessions/{session_id}', { params: { path: { session_id: session.id } } })
  assert.equal(deleted.data?.deleted, true)
  // A token the service does not know is refused in the error shape, not thrown.
  const stranger = await createClient({ baseUrl, token: 'svc_pat_unknown' }).GET('/v1/sessions')
  assert.equal(stranger.response.status, 401)
  assert.equal(stranger.error?.error.code, 'authentication_error')
})
