// Secrets through a real `warren serve` (debug logging on): the credentials of MCP servers, given
// at session creation, on a stored agent and through PUT /tools, used by a turn that connects to
// one server and fails to start another, never appear in a response, an event, an item, or any
// line the service writes; and they are kept sealed in the store.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { serviceProcess, type ServiceProcess } from './service-process.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { startFakeMcp, type FakeMcp } from './fakes/mcp-server.ts'

const AUTH = 'Bearer log-secret-auth-91f2'
const HEADER = 'log-secret-header-55aa'
const ENV = 'log-secret-env-c0de'
const PUT_AUTH = 'Bearer log-secret-put-7e7e'
const SECRETS = [AUTH, HEADER, ENV, PUT_AUTH, 'log-secret']

describe('secrets never reappear [sqlite, child process]', () => {
  let svc: ServiceProcess
  let fake: FakeModelServer
  let mcp: FakeMcp
  let dataDir: string
  const seen: string[] = []
  before(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-secrets-'))
    fake = await startModelServer({ models: ['m1'] })
    mcp = await startFakeMcp({ authorization: AUTH })
    svc = serviceProcess({ WARREN_DATA_DIR: dataDir, WARREN_LOG_LEVEL: 'debug', WARREN_ALLOW_PRIVATE_MCP: '1', WARREN_SANDBOX_PREFIX: `s${Math.floor(Math.random() * 1e5).toString(36)}` })
    await svc.start()
    svc.token = await svc.mint('secrets-org')
  })
  after(async () => {
    if (svc?.running) await svc.stop('SIGTERM')
    await fake?.close()
    await mcp?.close()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  const api = async (method: string, url: string, body?: unknown) => {
    const res = await svc.api(method, url, body)
    seen.push(res.text)
    return res
  }

  it('uses them and shows them nowhere', async () => {
    assert.equal((await api('POST', '/v1/model-credentials', { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] })).status, 201)
    const remote = { type: 'mcp', name: 'docs', url: mcp.url, authorization: AUTH, headers: { 'x-key': HEADER }, allowed_tools: ['search'] }
    const local = { type: 'mcp', name: 'broken', command: 'sh', args: ['-c', 'echo "starting with $TOKEN" >&2; exit 3'], env: { TOKEN: ENV } }
    const agent = await api('POST', '/v1/agents', { name: 'a', model: 'm1', tools: [remote, local] })
    assert.equal(agent.status, 201, agent.text)
    const session = await api('POST', '/v1/sessions', { agent: { id: agent.body.id } })
    assert.equal(session.status, 201, session.text)
    const sid = session.body.id as string
    fake.script({ toolCalls: [{ id: 'call_1', name: 'mcp__docs__search', args: { q: 'x' } }] }, { text: 'done' })
    const sent = await api('POST', `/v1/sessions/${sid}/messages`, { text: 'search' })
    assert.equal(sent.status, 202, sent.text)
    for (let i = 0; i < 200; i++) {
      const t = await api('GET', `/v1/sessions/${sid}/turns/${sent.body.id}`)
      if (t.body.status !== 'working' && t.body.artifacts !== 'pending') break
      await new Promise((r) => setTimeout(r, 100))
    }
    const turn = await api('GET', `/v1/sessions/${sid}/turns/${sent.body.id}`)
    assert.equal(turn.body.status, 'completed', turn.text)
    assert.deepEqual(mcp.calls.map((c) => c.tool), ['search'], 'the credentials were used')
    // The broken local server said its secret on stderr: the reason quotes it withheld.
    const items = await api('GET', `/v1/sessions/${sid}/items?limit=100&order=asc`)
    const unavailable = (items.body.data as { type: string; detail: { reason: string } }[]).find((i) => i.type === 'mcp_unavailable')
    assert.ok(unavailable, items.text)
    assert.match(unavailable.detail.reason, /starting with \[withheld\]/)

    assert.equal((await api('PUT', `/v1/sessions/${sid}/tools`, { tools: [{ ...remote, authorization: PUT_AUTH }] })).status, 200)
    await api('GET', `/v1/sessions/${sid}/tools`)
    await api('GET', `/v1/agents/${agent.body.id}`)
    await api('GET', `/v1/sessions/${sid}`)
    await api('GET', '/v1/openapi.json')
    await api('GET', `/v1/sessions/${sid}/items?limit=100&order=asc`)
    await svc.stop('SIGTERM')

    const everywhere = [...seen, ...svc.log].join('\n')
    assert.ok(svc.log.some((l) => l.includes(sid)), 'the log was captured (it names the session)')
    for (const s of SECRETS) assert.equal(everywhere.includes(s), false, `${s} appeared`)
    // At rest: sealed, never plain, in every table.
    const db = new DatabaseSync(path.join(dataDir, 'warren.db'), { readOnly: true })
    const tables = (db.prepare("select name from sqlite_master where type = 'table'").all() as { name: string }[]).map((t) => t.name)
    for (const t of tables) {
      const dump = JSON.stringify(db.prepare(`select * from "${t}"`).all())
      for (const s of SECRETS) assert.equal(dump.includes(s), false, `${s} is in the table ${t} in plain text`)
    }
    db.close()
  })
})
