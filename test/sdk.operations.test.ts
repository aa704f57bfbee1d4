// The SDK (sdk/) drives the real service, listening on a loopback port, through every operation
// of the description at least once, with a fake model provider behind the turns: the client the
// README shows is the client the tests use, and an operation the SDK cannot reach is a failure.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { createWarren, ok, WarrenError, type Warren as Sdk } from '../sdk/src/index.ts'
import { startWarren, type Warren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { ACTIONS_ENV } from './turn-actions-helpers.ts'
import { startSiteCommand } from './previews.helpers.ts'
import { operations, recordingFetch } from './sdk.helpers.ts'

const b64 = (s: string) => Buffer.from(s).toString('base64')
const LOOKUP = { type: 'function' as const, name: 'lookup_order', description: 'Look up an order by its id.', parameters: { type: 'object', properties: { id: { type: 'string' } } } }

let w: Warren
let fake: FakeModelServer
let sdk: Sdk
let called: Set<string>
let base: string

before(async () => {
  w = await startWarren('sqlite', { env: ACTIONS_ENV })
  base = await w.listen()
  fake = await startModelServer({ models: ['m1'] })
  const rec = recordingFetch()
  called = rec.called
  sdk = createWarren({ baseUrl: base, token: w.token, fetch: rec.fetch, source: 'cli' })
})
after(async () => {
  await w?.close()
  await fake?.close()
})

/** Polls a session's items until one carries `event`; returns its detail. */
async function itemWith(sessionId: string, event: string): Promise<Record<string, unknown>> {
  return waitFor(`an item ${event}`, async () => {
    const page = await ok(sdk.api.GET('/v1/sessions/{session_id}/items', { params: { path: { session_id: sessionId }, query: { order: 'asc', limit: 100 } } }))
    return page.data.find((i) => i.detail.event === event)?.detail as Record<string, unknown> | undefined
  }, 60_000)
}

async function settled(sessionId: string, turnId: string) {
  return waitFor(`turn ${turnId} settles`, async () => {
    const t = await ok(sdk.api.GET('/v1/sessions/{session_id}/turns/{turn_id}', { params: { path: { session_id: sessionId, turn_id: turnId } } }))
    return t.status !== 'working' && t.artifacts !== 'pending' && t
  }, 90_000)
}

it('reaches the service-wide operations: health, the description, tokens', async () => {
  const health = await ok(sdk.api.GET('/v1/health'))
  assert.ok(health.scopes.includes('sessions:read'))
  const doc = await ok(sdk.api.GET('/v1/openapi.json'))
  assert.equal((doc as { openapi: string }).openapi, '3.1.0')

  const minted = await ok(sdk.api.POST('/v1/tokens', { body: { name: 'sdk', scopes: ['sessions:read'], expires_in_days: 7 } }))
  assert.match(minted.token ?? '', /^svc_pat_/)
  const list = await ok(sdk.api.GET('/v1/tokens'))
  assert.ok(list.data.some((t) => t.id === minted.id))
  const revoked = await ok(sdk.api.DELETE('/v1/tokens/{token_id}', { params: { path: { token_id: minted.id } } }))
  assert.equal(revoked.id, minted.id)
  // A refusal comes back as the specification's error, with its code and request id.
  const gone = await sdk.api.GET('/v1/sessions/{session_id}', { params: { path: { session_id: 'ses_nope' } } })
  const err = await ok(Promise.resolve(gone)).catch((e: unknown) => e)
  assert.ok(err instanceof WarrenError)
  assert.equal(err.code, 'not_found')
  assert.equal(err.status, 404)
  assert.equal(err.requestId, gone.response.headers.get('x-request-id'))
})

it('manages model connections, stored agents, environment profiles and templates, webhooks', async () => {
  const cred = await ok(sdk.api.POST('/v1/model-credentials', { body: { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] } }))
  assert.equal((await ok(sdk.api.GET('/v1/model-credentials/{credential_id}', { params: { path: { credential_id: cred.id } } }))).id, cred.id)
  assert.ok((await ok(sdk.api.GET('/v1/model-credentials'))).data.some((c) => c.id === cred.id))
  const spare = await ok(sdk.api.POST('/v1/model-credentials', { body: { provider: 'anthropic', api_key: 'sk-spare', base_url: fake.url, models: ['m1'] } }))
  assert.equal((await ok(sdk.api.DELETE('/v1/model-credentials/{credential_id}', { params: { path: { credential_id: spare.id } } }))).deleted, true)

  const agent = await ok(sdk.api.POST('/v1/agents', { body: { name: 'helper', model: 'm1', instructions: 'Be brief.' } }))
  const updated = await ok(sdk.api.POST('/v1/agents/{agent_id}', { params: { path: { agent_id: agent.id } }, body: { instructions: 'Be very brief.' } }))
  assert.equal(updated.instructions, 'Be very brief.')
  assert.equal((await ok(sdk.api.GET('/v1/agents/{agent_id}', { params: { path: { agent_id: agent.id } } }))).instructions, 'Be very brief.')
  assert.ok((await ok(sdk.api.GET('/v1/agents'))).data.some((a) => a.id === agent.id))
  assert.equal((await ok(sdk.api.DELETE('/v1/agents/{agent_id}', { params: { path: { agent_id: agent.id } } }))).deleted, true)

  const profile = await ok(sdk.api.POST('/v1/environment-profiles', { body: { name: 'sdk-prof', env: { K: 'v' } } }))
  assert.deepEqual(profile.keys, ['K'])
  assert.equal((await ok(sdk.api.GET('/v1/environment-profiles/{profile_id}', { params: { path: { profile_id: profile.id } } }))).id, profile.id)
  assert.ok((await ok(sdk.api.GET('/v1/environment-profiles'))).data.some((p) => p.id === profile.id))
  const template = await ok(sdk.api.POST('/v1/environment-templates', { body: { name: 'sdk-tpl', profiles: [profile.id] } }))
  assert.equal((await ok(sdk.api.GET('/v1/environment-templates/{template_id}', { params: { path: { template_id: template.id } } }))).id, template.id)
  assert.ok((await ok(sdk.api.GET('/v1/environment-templates'))).data.some((t) => t.id === template.id))
  assert.equal((await ok(sdk.api.DELETE('/v1/environment-templates/{template_id}', { params: { path: { template_id: template.id } } }))).deleted, true)
  assert.equal((await ok(sdk.api.DELETE('/v1/environment-profiles/{profile_id}', { params: { path: { profile_id: profile.id } } }))).deleted, true)

  const hook = await ok(sdk.api.POST('/v1/webhooks', { body: { url: 'https://hooks.example.com/warren', events: ['turn.completed'] } }))
  assert.match(hook.secret ?? '', /.{16,}/)
  assert.equal((await ok(sdk.api.GET('/v1/webhooks/{webhook_id}', { params: { path: { webhook_id: hook.id } } }))).id, hook.id)
  assert.ok((await ok(sdk.api.GET('/v1/webhooks'))).data.some((h) => h.id === hook.id))
  assert.equal((await ok(sdk.api.DELETE('/v1/webhooks/{webhook_id}', { params: { path: { webhook_id: hook.id } } }))).deleted, true)
})

it('runs a session end to end: approvals, questions, caller functions, files, artifacts, previews, cancel, usage', async () => {
  const session = await ok(sdk.api.POST('/v1/sessions', { body: { title: 'sdk', metadata: { via: 'sdk' }, agent: { model: 'm1', approval_mode: 'ask' }, tools: [LOOKUP] } }))
  assert.equal(session.source, 'cli', 'X-Warren-Source: cli is recorded')
  const sid = session.id
  const path = { session_id: sid }
  assert.equal((await ok(sdk.api.GET('/v1/sessions/{session_id}', { params: { path } }))).title, 'sdk')
  assert.ok((await ok(sdk.api.GET('/v1/sessions', { params: { query: { metadata: ['via:sdk'] } } }))).data.some((s) => s.id === sid))
  assert.equal((await ok(sdk.api.POST('/v1/sessions/{session_id}', { params: { path }, body: { title: 'sdk, renamed' } }))).title, 'sdk, renamed')
  const tools = await ok(sdk.api.GET('/v1/sessions/{session_id}/tools', { params: { path } }))
  assert.ok(tools.tools.some((t) => t.type === 'function'))
  await ok(sdk.api.PUT('/v1/sessions/{session_id}/tools', { params: { path }, body: { tools: [LOOKUP] } }))
  await ok(sdk.api.POST('/v1/sessions/{session_id}/files', { params: { path }, body: { files: [{ path: 'in.txt', content: b64('uploaded\n') }] } }))

  // One turn: an approved bash call (that starts the preview site), a question, a caller function.
  fake.script(
    { toolCalls: [{ id: 'call_bash', name: 'bash', args: { command: `cat in.txt > out.txt && ${startSiteCommand(4321)}` } }] },
    { toolCalls: [{ id: 'call_q', name: 'ask_question', args: { question: 'Which?', options: ['a', 'b'], allow_freeform: false } }] },
    { toolCalls: [{ id: 'call_fn', name: 'lookup_order', args: { id: 'o-1' } }] },
    { text: 'All done.' },
  )
  const turn = await ok(sdk.api.POST('/v1/sessions/{session_id}/messages', { params: { path }, body: { text: 'go' } }))
  await itemWith(sid, 'approval.requested')
  const approval = await ok(sdk.api.POST('/v1/sessions/{session_id}/approvals/{tool_call_id}', { params: { path: { session_id: sid, tool_call_id: 'call_bash' } }, body: { approved: true } }))
  assert.equal(approval.approved, true)
  await itemWith(sid, 'question.asked')
  assert.equal((await ok(sdk.api.POST('/v1/sessions/{session_id}/questions/{tool_call_id}', { params: { path: { session_id: sid, tool_call_id: 'call_q' } }, body: { answer: 'b' } }))).answer, 'b')
  await itemWith(sid, 'tool.required')
  await ok(sdk.api.POST('/v1/sessions/{session_id}/required_actions/{call_id}', { params: { path: { session_id: sid, call_id: 'call_fn' } }, body: { output: 'order o-1 shipped' } }))
  const done = await settled(sid, turn.id)
  assert.equal(done.status, 'completed')
  assert.ok((await ok(sdk.api.GET('/v1/sessions/{session_id}/turns', { params: { path } }))).data.some((t) => t.id === turn.id))

  const artifacts = await ok(sdk.api.GET('/v1/sessions/{session_id}/artifacts', { params: { path } }))
  const out = artifacts.data.find((a) => a.path === 'out.txt')
  assert.ok(out, `out.txt is published: ${JSON.stringify(artifacts.data.map((a) => a.path))}`)
  const content = await sdk.api.GET('/v1/sessions/{session_id}/artifacts/{artifact_id}/content', { params: { path: { session_id: sid, artifact_id: out.id } }, parseAs: 'text' })
  assert.equal(content.data, 'uploaded\n')
  const archive = await sdk.api.GET('/v1/sessions/{session_id}/artifacts/archive', { params: { path }, parseAs: 'arrayBuffer' })
  assert.equal(archive.response.headers.get('content-type'), 'application/x-tar')
  assert.ok(Buffer.from(archive.data as ArrayBuffer).includes('uploaded\n'))

  // The preview, through the API's own address with the token: every method, root and path.
  const preview = await ok(sdk.api.POST('/v1/sessions/{session_id}/preview', { params: { path }, body: { port: 4321 } }))
  assert.equal(preview.port, 4321)
  type Proxied = (url: string, init: object) => Promise<{ data?: unknown; response: Response }>
  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const) {
    const send = sdk.api[method] as unknown as Proxied
    const root = await send('/v1/sessions/{session_id}/preview/proxy', { params: { path }, parseAs: 'text' })
    assert.equal(root.response.status, 200, `${method} root: ${String(root.data)}`)
    const deep = await send('/v1/sessions/{session_id}/preview/proxy/{path}', { params: { path: { session_id: sid, path: 'deep/page' } }, parseAs: 'text' })
    assert.equal(deep.response.status, 200, `${method} path: ${String(deep.data)}`)
  }
  assert.equal((await ok(sdk.api.DELETE('/v1/sessions/{session_id}/preview', { params: { path } }))).deleted, true)

  // A turn parked on an approval, cancelled.
  fake.script({ toolCalls: [{ id: 'call_wait', name: 'bash', args: { command: 'echo never' } }] })
  const parked = await ok(sdk.api.POST('/v1/sessions/{session_id}/messages', { params: { path }, body: { text: 'wait' } }))
  await waitFor('the second approval', async () => (await ok(sdk.api.GET('/v1/sessions/{session_id}/items', { params: { path, query: { order: 'desc', limit: 5 } } }))).data.some((i) => i.detail.event === 'approval.requested' && i.turn_id === parked.id), 60_000)
  await ok(sdk.api.POST('/v1/sessions/{session_id}/turns/{turn_id}/cancel', { params: { path: { session_id: sid, turn_id: parked.id } } }))
  assert.equal((await settled(sid, parked.id)).status, 'cancelled')

  const usage = await ok(sdk.api.GET('/v1/sessions/{session_id}/usage', { params: { path } }))
  assert.equal(usage.object, 'session.usage')
  assert.equal((await ok(sdk.api.DELETE('/v1/sessions/{session_id}', { params: { path } }))).deleted, true)
})

it('follows both event streams', async () => {
  const session = await ok(sdk.api.POST('/v1/sessions', { body: { agent: { model: 'm1' } } }))
  const ac = new AbortController()
  const seen: string[] = []
  const org = (async () => {
    for await (const e of sdk.events({ after: 0, signal: ac.signal })) if (e.session_id === session.id) seen.push(`org ${e.type}`)
  })()
  fake.script({ text: 'Hello.' })
  const turn = await ok(sdk.api.POST('/v1/sessions/{session_id}/messages', { params: { path: { session_id: session.id } }, body: { text: 'hi' } }))
  for await (const e of sdk.events({ sessionId: session.id, after: 0 })) {
    if (e.type === 'agent.message') assert.equal(e.payload.text, 'Hello.')
    if (e.type === 'turn.ended' && e.payload.turnId === turn.id) break
  }
  await waitFor('the organization stream sees the turn end', async () => seen.includes('org turn.ended'), 30_000)
  ac.abort()
  await org
})

it('called every operation of the description', () => {
  const missing = operations().filter((op) => !called.has(op))
  assert.deepEqual(missing, [], `operations the SDK test never reached: ${missing.join(', ')}`)
})
