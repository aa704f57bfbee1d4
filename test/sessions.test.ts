import { it } from 'node:test'
import assert from 'node:assert/strict'
import { errorOf, forEachDialect, useWarren } from './harness.ts'
import { connectModel } from './fixtures.ts'

const b64 = (s: string) => Buffer.from(s).toString('base64')

forEachDialect('sessions', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_RATE_SESSIONS_PER_MIN: '1000', WARREN_RATE_GENERAL_PER_MIN: '10000', WARREN_MAX_SESSIONS_PER_ORG: '4' } })
  let credentialId = ''

  it('refuses a session when the organization has no model connection, and leaves nothing', async () => {
    const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })
    assert.equal(res.statusCode, 400)
    assert.match(errorOf(res).message, /no model connection/)
    const list = await w().inject({ method: 'GET', url: '/v1/sessions' })
    assert.deepEqual(list.json().data, [])
    credentialId = await connectModel(w(), ['gpt-test', 'gpt-other'])
  })

  it('creates a complete session from nothing, on the default connection', async () => {
    const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })
    assert.equal(res.statusCode, 201, res.body)
    const s = res.json()
    assert.equal(s.object, 'session')
    assert.match(s.id, /^ses_/)
    assert.equal(s.status, 'idle')
    assert.equal(typeof s.created_at, 'number')
    assert.equal(s.created_at, s.updated_at)
    assert.equal(s.agent.model, 'gpt-test')
    assert.equal(s.agent.model_credential_id, credentialId)
    assert.equal(s.agent.approval_mode, 'auto')
    assert.deepEqual(s.agent.permission_rules, [])
    assert.deepEqual(s.agent.tools.map((t: { type: string }) => t.type).sort(), ['browse', 'browser_act', 'screenshot', 'web_fetch'], 'the default set: no search backend here, so no web_search or image_search')
    assert.equal(s.environment.type, 'sandbox')
    assert.equal(s.environment.workspace_directory, '/workspace')
    assert.equal(s.source, 'api')
    assert.deepEqual(s.required_actions, [])
    assert.deepEqual(s.metadata, {})
    const tokens = await w().inject({ method: 'GET', url: '/v1/health' })
    assert.equal(s.created_by_token, tokens.json().token_id)
    const again = await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}` })
    assert.deepEqual(again.json(), s)
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })

  it('validates every documented field and names what it refuses', async () => {
    const cases: [unknown, RegExp][] = [
      [{ agent: { model: 'gpt-test', bogus: 1 } }, /agent\.bogus/],
      [{ agent: { model: 'nope-model' } }, /nope-model/],
      [{ agent: { model_credential_id: 'mc_doesnotexist' } }, /mc_doesnotexist/],
      [{ metadata: { n: 5 } }, /metadata/],
      [{ metadata: { k: 'x'.repeat(513) } }, /metadata/],
      [{ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, /metadata/],
      [{ metadata: { ['k'.repeat(65)]: 'v' } }, /metadata/],
      [{ agent: { permission_rules: Array.from({ length: 51 }, () => ({ decision: 'allow', tool: 'bash' })) } }, /permission_rules/],
      [{ agent: { permission_rules: [{ decision: 'allow', tool: 'x'.repeat(501) }] } }, /permission_rules\[0\]\.tool/],
      [{ agent: { permission_rules: [{ decision: 'maybe' }] } }, /decision/],
      [{ agent: { approval_mode: 'sometimes' } }, /approval_mode/],
      [{ tools: [{ type: 'web_fetch' }], agent: { tools: [{ type: 'browse' }] } }, /not both/],
      [{ tools: [{ type: 'function', name: 'f', secret: 1 }] }, /tools\[0\]\.secret.*accepts type, name, description, parameters, timeout_seconds/],
      [{ tools: [{ type: 'teleport' }] }, /type/],
      [{ environment: { files: [{ path: '../escape', content: b64('x') }] } }, /inside the workspace/],
      [{ environment: { files: [{ path: '/etc/passwd', content: b64('x') }] } }, /inside the workspace/],
      [{ environment: { files: [{ path: 'a', content: '***' }] } }, /base64/],
      [{ environment: { repo: { full_name: 'not a repo' } } }, /full_name/],
      [{ environment: { repo: { full_name: 'acme/..' } } }, /full_name/],
      [{ environment: { template: 'no-such-template' } }, /no-such-template/],
      [{ environment: { profiles: ['no-such-profile'] } }, /no-such-profile/],
      [{ agent: { id: 'agt_missing' } }, /agt_missing/],
    ]
    for (const [payload, message] of cases) {
      const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload: payload as object })
      assert.equal(res.statusCode, 400, `${JSON.stringify(payload)} → ${res.body}`)
      const e = errorOf(res)
      assert.equal(e.code, 'invalid_request')
      assert.match(e.message, message, JSON.stringify(payload))
    }
    const list = await w().inject({ method: 'GET', url: '/v1/sessions' })
    assert.deepEqual(list.json().data, [], 'no refused create left a session behind')
  })

  it('refuses over-limit files whole: one over 5 MiB, over 10 MiB in all, over 50 files', async () => {
    const big = Buffer.alloc(5 * 1024 * 1024 + 1, 97).toString('base64')
    const four = Buffer.alloc(4 * 1024 * 1024, 97).toString('base64')
    const tooMany = Array.from({ length: 51 }, (_, i) => ({ path: `f${i}`, content: b64('x') }))
    for (const files of [[{ path: 'big', content: big }], [1, 2, 3].map((i) => ({ path: `f${i}`, content: four })), tooMany]) {
      const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload: { environment: { files } } })
      assert.equal(res.statusCode, 400, res.body.slice(0, 200))
      assert.equal(errorOf(res).code, 'invalid_request')
    }
    const seeds = await w().store.db.selectFrom('seed_files').select('owner_id').execute()
    assert.equal(seeds.length, 0)
    assert.deepEqual((await w().inject({ method: 'GET', url: '/v1/sessions' })).json().data, [])
  })

  it('keeps fields as sent: metadata, title, agent settings, tools with credentials withheld, files, repo', async () => {
    const payload = {
      title: 'Fix the parser',
      metadata: { ticket: 'T-1', team: 'core' },
      agent: {
        model: 'gpt-other',
        approval_mode: 'read_only',
        instructions: 'Be brief.',
        permission_rules: [{ decision: 'deny', command: 'rm *' }, { decision: 'ask', path: 'src/**' }],
        tools: [
          { type: 'web_fetch' },
          { type: 'function', name: 'lookup', description: 'Looks up', parameters: { type: 'object' } },
          { type: 'mcp', name: 'docs', url: 'https://mcp.example/sse', authorization: 'Bearer s3cret-auth', headers: { 'X-Key': 's3cret-header' }, required: false },
        ],
      },
      environment: { files: [{ path: 'src/a.txt', content: b64('hello'), mode: 0o755 }], repo: { full_name: 'acme/widgets', branch: 'main' } },
    }
    const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload, headers: { 'x-warren-source': 'cli' } })
    assert.equal(res.statusCode, 201, res.body)
    assert.ok(!res.body.includes('s3cret'), 'credentials never come back')
    const s = res.json()
    assert.equal(s.title, 'Fix the parser')
    assert.deepEqual(s.metadata, payload.metadata)
    assert.equal(s.source, 'cli')
    assert.equal(s.agent.model, 'gpt-other')
    assert.equal(s.agent.approval_mode, 'read_only')
    assert.equal(s.agent.instructions, 'Be brief.')
    assert.deepEqual(s.agent.permission_rules, payload.agent.permission_rules)
    assert.deepEqual(s.agent.tools[0], { type: 'web_fetch' })
    assert.deepEqual(s.agent.tools[1], payload.agent.tools[1])
    assert.deepEqual(s.agent.tools[2], { type: 'mcp', name: 'docs', url: 'https://mcp.example/sse', required: false, redacted: ['authorization', 'headers.X-Key'] })
    assert.deepEqual(s.environment.repo, { full_name: 'acme/widgets', branch: 'main', clone_error: null })
    const seeds = await w().store.db.selectFrom('seed_files').selectAll().where('owner_id', '=', s.id).execute()
    assert.equal(seeds.length, 1)
    assert.equal(Buffer.from(seeds[0]!.content).toString(), 'hello')
    assert.equal(seeds[0]!.mode, 0o755)

    const del = await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
    assert.deepEqual(del.json(), { object: 'session.deleted', id: s.id, deleted: true })
    assert.equal((await w().store.db.selectFrom('seed_files').selectAll().where('owner_id', '=', s.id).execute()).length, 0, 'seed files go with the session')
    assert.equal((await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}` })).statusCode, 404)
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })).statusCode, 404)
  })

  it('updates the title and replaces metadata, moving updated_at', async () => {
    const s = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: { metadata: { a: '1', b: '2' } } })).json()
    await new Promise((r) => setTimeout(r, 5))
    const res = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}`, payload: { title: 'renamed', metadata: { c: '3' } } })
    assert.equal(res.statusCode, 200, res.body)
    const u = res.json()
    assert.equal(u.title, 'renamed')
    assert.deepEqual(u.metadata, { c: '3' })
    assert.ok(u.updated_at > s.updated_at)
    assert.equal(u.created_at, s.created_at)
    const bad = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}`, payload: { status: 'idle' } })
    assert.equal(bad.statusCode, 400)
    assert.match(errorOf(bad).message, /status/)
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })

  it('holds the concurrent-session ceiling, refuses with project_limit_exceeded, and DELETE frees a slot at once', async () => {
    const ids: string[] = []
    const results = await Promise.all(Array.from({ length: 6 }, () => w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })))
    for (const r of results) if (r.statusCode === 201) ids.push(r.json().id)
    assert.equal(ids.length, 4, 'exactly the ceiling was created, even racing')
    const refused = results.filter((r) => r.statusCode === 429)
    assert.equal(refused.length, 2)
    assert.equal(errorOf(refused[0]!).code, 'project_limit_exceeded')
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${ids.pop()}` })
    const again = await w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })
    assert.equal(again.statusCode, 201)
    ids.push(again.json().id)
    for (const id of ids) await w().inject({ method: 'DELETE', url: `/v1/sessions/${id}` })
  })

  it('lists with filters, order, cursor and has_more', async () => {
    const other = await w().mint(undefined, undefined)
    await connectModel(w(), ['gpt-test'], other.token)
    const made: string[] = []
    for (const [i, meta] of [{ env: 'prod' }, { env: 'dev' }, { env: 'prod', x: 'y:z' }].entries()) {
      const r = await w().inject({ method: 'POST', url: '/v1/sessions', payload: { metadata: meta, title: `s${i}` }, headers: i === 2 ? { 'x-warren-source': 'console' } : {} })
      assert.equal(r.statusCode, 201, r.body)
      made.push(r.json().id)
    }
    await w().inject({ method: 'POST', url: '/v1/sessions', token: other.token, payload: {} })
    const all = (await w().inject({ method: 'GET', url: '/v1/sessions' })).json()
    assert.deepEqual(all.data.map((s: { id: string }) => s.id), [...made].reverse(), 'newest first, own organization only')
    const asc = (await w().inject({ method: 'GET', url: '/v1/sessions?order=asc' })).json()
    assert.deepEqual(asc.data.map((s: { id: string }) => s.id), made)
    const page1 = (await w().inject({ method: 'GET', url: '/v1/sessions?limit=2' })).json()
    assert.equal(page1.has_more, true)
    assert.equal(page1.last_id, made[1])
    const page2 = (await w().inject({ method: 'GET', url: `/v1/sessions?limit=2&after=${page1.last_id}` })).json()
    assert.deepEqual(page2.data.map((s: { id: string }) => s.id), [made[0]])
    assert.equal(page2.has_more, false)
    const exact = (await w().inject({ method: 'GET', url: '/v1/sessions?limit=3' })).json()
    assert.equal(exact.has_more, false, 'has_more looks one row past the page')
    const prod = (await w().inject({ method: 'GET', url: '/v1/sessions?metadata=env:prod' })).json()
    assert.deepEqual(prod.data.map((s: { id: string }) => s.id).sort(), [made[0], made[2]].sort())
    const both = (await w().inject({ method: 'GET', url: '/v1/sessions?metadata=env:prod&metadata=x:y:z' })).json()
    assert.deepEqual(both.data.map((s: { id: string }) => s.id), [made[2]])
    const consoleOnly = (await w().inject({ method: 'GET', url: '/v1/sessions?source=console' })).json()
    assert.deepEqual(consoleOnly.data.map((s: { id: string }) => s.id), [made[2]])
    const idle = (await w().inject({ method: 'GET', url: '/v1/sessions?status=idle&limit=100' })).json()
    assert.equal(idle.data.length, 3)
    const working = (await w().inject({ method: 'GET', url: '/v1/sessions?status=working' })).json()
    assert.deepEqual(working.data, [])
    const foreignCursor = (await w().inject({ method: 'GET', url: '/v1/sessions', token: other.token })).json().data[0].id
    const unplaced = (await w().inject({ method: 'GET', url: `/v1/sessions?after=${foreignCursor}` })).json()
    assert.deepEqual(unplaced, { object: 'list', data: [], has_more: false, last_id: '' })
    for (const q of ['status=dead', 'source=web', 'created_by=you', 'limit=0', 'limit=101', 'order=up', 'metadata=novalue', 'colour=red']) {
      const r = await w().inject({ method: 'GET', url: `/v1/sessions?${q}` })
      assert.equal(r.statusCode, 400, q)
    }
    for (const id of made) await w().inject({ method: 'DELETE', url: `/v1/sessions/${id}` })
  })

  it('created_by=me narrows to the calling token; another organization sees 404', async () => {
    const a = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json()
    const org = await w().store.db.selectFrom('orgs').select('name').where('id', '=', w().orgId).executeTakeFirstOrThrow()
    const sibling = await w().mint(org.name)
    const b = (await w().inject({ method: 'POST', url: '/v1/sessions', token: sibling.token, payload: {} })).json()
    assert.equal(b.created_by_token, sibling.id)
    const outsider = await w().mint()
    for (const [method, url] of [['GET', `/v1/sessions/${a.id}`], ['POST', `/v1/sessions/${a.id}`], ['DELETE', `/v1/sessions/${a.id}`], ['GET', `/v1/sessions/${a.id}/items`], ['GET', `/v1/sessions/${a.id}/usage`]] as const) {
      const res = await w().inject({ method, url, token: outsider.token, ...(method === 'POST' ? { payload: {} } : {}) })
      const missing = await w().inject({ method, url: url.replace(a.id, 'ses_doesnotexist00000000000'), token: outsider.token, ...(method === 'POST' ? { payload: {} } : {}) })
      assert.equal(res.statusCode, 404, `${method} ${url}`)
      assert.equal(errorOf(res).code, errorOf(missing).code)
      assert.equal(errorOf(res).message.replace(a.id, 'X'), errorOf(missing).message.replace('ses_doesnotexist00000000000', 'X'))
    }
    const mine = (await w().inject({ method: 'GET', url: '/v1/sessions?created_by=me' })).json()
    assert.deepEqual(mine.data.map((s: { id: string }) => s.id), [a.id])
    const theirs = (await w().inject({ method: 'GET', url: '/v1/sessions?created_by=me', token: sibling.token })).json()
    assert.deepEqual(theirs.data.map((s: { id: string }) => s.id), [b.id])
    const everyone = (await w().inject({ method: 'GET', url: '/v1/sessions' })).json()
    assert.deepEqual(everyone.data.map((s: { id: string }) => s.id), [b.id, a.id], 'the list spans all callers of the organization')
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${a.id}` })
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${b.id}` })
  })

  it('records session.created in the log in the same transaction, unpublished as an item', async () => {
    const s = (await w().inject({ method: 'POST', url: '/v1/sessions', payload: {} })).json()
    const events = await w().store.db.selectFrom('events').selectAll().where('session_id', '=', s.id).execute()
    assert.deepEqual(events.map((e) => e.type), ['session.created'])
    const items = await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}/items` })
    assert.equal(items.statusCode, 200)
    assert.deepEqual(items.json(), { object: 'list', data: [], has_more: false, last_id: '' })
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })
})
