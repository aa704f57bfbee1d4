import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { secretBox } from '../src/shared/secret-box.ts'
import { getProfileEnv, getTemplateByName, resolveProfiles } from '../src/environments/environments.store.ts'
import { errorOf, forEachDialect, useWarren, type Warren } from './harness.ts'

const SECRET = 'sk-live-do-not-leak-4f1d8a'
const box = secretBox(Buffer.alloc(32, 7))
const b64 = (text: string | Buffer) => Buffer.from(text).toString('base64')

const post = (w: Warren, what: 'profiles' | 'templates', payload: unknown, token?: string) =>
  w.inject({ method: 'POST', url: `/v1/environment-${what}`, payload: payload as object, token })
const get = (w: Warren, url: string, token?: string) => w.inject({ method: 'GET', url, token })
const seedFiles = (w: Warren, ownerId: string) => w.store.db.selectFrom('seed_files').selectAll().where('owner_id', '=', ownerId).orderBy('path').execute()

forEachDialect('environment profiles', (dialect) => {
  const w = useWarren(dialect)

  it('creates a profile whose values are write-only and sealed at rest', async () => {
    const res = await post(w(), 'profiles', { name: 'prod', env: { ZED: SECRET, API_URL: 'https://api.example.com', _x1: '' } })
    assert.equal(res.statusCode, 201)
    const p = res.json()
    assert.match(p.id, /^envp_/)
    assert.deepEqual(p, { object: 'environment.profile', id: p.id, name: 'prod', keys: ['API_URL', 'ZED', '_x1'], created_at: p.created_at })
    assert.equal(res.body.includes(SECRET), false)
    for (const url of [`/v1/environment-profiles/${p.id}`, '/v1/environment-profiles']) {
      const r = await get(w(), url)
      assert.equal(r.statusCode, 200)
      assert.equal(r.body.includes(SECRET), false, url)
      assert.equal(r.body.includes('api.example.com'), false, url)
    }
    assert.deepEqual((await get(w(), `/v1/environment-profiles/${p.id}`)).json(), p)
    const row = await w().store.db.selectFrom('environment_profiles').selectAll().where('id', '=', p.id).executeTakeFirstOrThrow()
    assert.equal(row.env_enc.includes(SECRET), false)
    assert.deepEqual(await getProfileEnv(w().store.db, box, w().orgId, [p.id]), { ZED: SECRET, API_URL: 'https://api.example.com', _x1: '' })
  })

  it('refuses bad keys and values, naming the key and never echoing the value', async () => {
    const big = 'v'.repeat(32 * 1024 + 1)
    const cases: [unknown, RegExp][] = [
      [{ '1BAD': 'x' }, /"1BAD"/],
      [{ 'WITH-DASH': 'x' }, /"WITH-DASH"/],
      [{ 'A B': 'x' }, /"A B"/],
      [{ OK: 'x', LONG: big }, /env\.LONG.*32 KiB/],
      [{ NUM: 5 }, /env\.NUM/],
      [Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`K${i}`, 'x'])), /at most 100 keys/],
    ]
    for (const [env, msg] of cases) {
      const res = await post(w(), 'profiles', { name: 'bad', env })
      assert.equal(res.statusCode, 400, JSON.stringify(env).slice(0, 80))
      const err = errorOf(res)
      assert.equal(err.code, 'invalid_request')
      assert.match(err.message, msg)
      assert.equal(res.body.includes('vvvvvvvv'), false)
    }
    // 32 KiB exactly, 100 keys exactly: accepted.
    const ok = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`K${i}`, i === 0 ? 'v'.repeat(32 * 1024) : 'x']))
    assert.equal((await post(w(), 'profiles', { name: 'at-limits', env: ok })).statusCode, 201)
    assert.equal((await get(w(), '/v1/environment-profiles?limit=100')).json().data.some((p: { name: string }) => p.name === 'bad'), false)
    assert.equal((await post(w(), 'profiles', { name: 'envp_looks_like_an_id', env: {} })).statusCode, 400)
    assert.match(errorOf(await post(w(), 'profiles', { name: 'x', env: {}, values: {} })).message, /Unknown field "values"/)
    assert.match(errorOf(await post(w(), 'profiles', { env: {} })).message, /"name"/)
  })

  it('gives 409 naming the existing profile when the name is taken in the organization', async () => {
    const first = (await post(w(), 'profiles', { name: 'shared', env: { A: '1' } })).json()
    const dup = await post(w(), 'profiles', { name: 'shared', env: { B: '2' } })
    assert.equal(dup.statusCode, 409)
    assert.equal(errorOf(dup).code, 'conflict')
    assert.ok(errorOf(dup).message.includes(first.id))
    const { token } = await w().mint()
    assert.equal((await post(w(), 'profiles', { name: 'shared', env: { A: '1' } }, token)).statusCode, 201)
    const race = await Promise.all([1, 2].map(() => post(w(), 'profiles', { name: 'raced', env: {} }, token)))
    assert.deepEqual(race.map((r) => r.statusCode).sort(), [201, 409])
  })

  it('pages newest first; refuses order; an unplaceable cursor gives an empty page', async () => {
    const { token } = await w().mint()
    const ids: string[] = []
    for (const name of ['a', 'b', 'c']) {
      ids.push((await post(w(), 'profiles', { name, env: {} }, token)).json().id)
      await sleep(3)
    }
    const p1 = (await get(w(), '/v1/environment-profiles?limit=2', token)).json()
    assert.deepEqual(p1.data.map((p: { id: string }) => p.id), [ids[2], ids[1]])
    assert.equal(p1.has_more, true)
    assert.equal(p1.last_id, ids[1])
    const p2 = (await get(w(), `/v1/environment-profiles?limit=2&after=${p1.last_id}`, token)).json()
    assert.deepEqual(p2.data.map((p: { id: string }) => p.id), [ids[0]])
    assert.equal(p2.has_more, false)
    const foreign = (await post(w(), 'profiles', { name: 'foreign-cursor', env: {} })).json().id
    for (const after of ['envp_never', foreign]) {
      assert.deepEqual((await get(w(), `/v1/environment-profiles?after=${after}`, token)).json(), { object: 'list', data: [], has_more: false, last_id: '' })
    }
    const order = await get(w(), '/v1/environment-profiles?order=desc', token)
    assert.equal(order.statusCode, 400)
    assert.match(errorOf(order).message, /order/)
    assert.equal((await get(w(), '/v1/environment-profiles?limit=101', token)).statusCode, 400)
  })

  it('deletes a profile, and templates that named it stop naming it', async () => {
    const p = (await post(w(), 'profiles', { name: 'to-delete', env: { K: 'v' } })).json()
    const keep = (await post(w(), 'profiles', { name: 'to-keep', env: { K: 'v' } })).json()
    const t = (await post(w(), 'templates', { name: 'uses-profiles', profiles: ['to-delete', keep.id] })).json()
    assert.deepEqual(t.profiles, [p.id, keep.id])
    const res = await w().inject({ method: 'DELETE', url: `/v1/environment-profiles/${p.id}` })
    assert.deepEqual(res.json(), { object: 'environment.profile.deleted', id: p.id, deleted: true })
    assert.equal((await get(w(), `/v1/environment-profiles/${p.id}`)).statusCode, 404)
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/environment-profiles/${p.id}` })).statusCode, 404)
    assert.deepEqual((await get(w(), `/v1/environment-templates/${t.id}`)).json().profiles, [keep.id])
  })

  it('resolves profiles by id or name for the sessions domain, naming an unknown one', async () => {
    const p = (await post(w(), 'profiles', { name: 'resolvable', env: { A: '1' } })).json()
    const q = (await post(w(), 'profiles', { name: 'second', env: { A: '2', B: '3' } })).json()
    assert.deepEqual(await resolveProfiles(w().store.db, w().orgId, ['resolvable', q.id, p.id]), [{ id: p.id, name: 'resolvable' }, { id: q.id, name: 'second' }])
    await assert.rejects(resolveProfiles(w().store.db, w().orgId, ['resolvable', 'ghost']), (e: Error & { code?: string }) => e.code === 'invalid_request' && e.message.includes('"ghost"'))
    const { orgId } = await w().mint()
    await assert.rejects(resolveProfiles(w().store.db, orgId, [p.id]), /envp_/)
    // A later profile wins a key; a deleted one is skipped.
    assert.deepEqual(await getProfileEnv(w().store.db, box, w().orgId, [p.id, q.id, 'envp_gone']), { A: '2', B: '3' })
  })

  it("answers another organization's profile like a missing one, and checks scopes", async () => {
    const p = (await post(w(), 'profiles', { name: 'private', env: { A: '1' } })).json()
    const other = await w().mint()
    for (const method of ['GET', 'DELETE'] as const) {
      const theirs = await w().inject({ method, url: `/v1/environment-profiles/${p.id}`, token: other.token })
      const missing = await w().inject({ method, url: '/v1/environment-profiles/envp_missing', token: other.token })
      assert.equal(theirs.statusCode, 404)
      assert.equal(errorOf(theirs).message.replace(p.id, 'ID'), errorOf(missing).message.replace('envp_missing', 'ID'))
    }
    const reader = await w().mint(undefined, ['environments:read'])
    const writer = await w().mint(undefined, ['environments:write'])
    const denied = await post(w(), 'profiles', { name: 'n', env: {} }, reader.token)
    assert.equal(denied.statusCode, 403)
    assert.match(errorOf(denied).message, /environments:write/)
    const read = await get(w(), '/v1/environment-profiles', writer.token)
    assert.equal(read.statusCode, 403)
    assert.match(errorOf(read).message, /environments:read/)
  })
})

forEachDialect('environment templates', (dialect) => {
  const w = useWarren(dialect)

  it('creates a template with files, repo, setup and profiles by id or name', async () => {
    const a = (await post(w(), 'profiles', { name: 'tpl-a', env: { A: '1' } })).json()
    const b = (await post(w(), 'profiles', { name: 'tpl-b', env: { B: '2' } })).json()
    const res = await post(w(), 'templates', {
      name: 'node-app',
      files: [
        { path: 'src/index.js', content: b64('console.log(1)\n') },
        { path: './run.sh', content: b64('#!/bin/sh\n'), mode: 0o755 },
      ],
      repo: { full_name: 'acme/widgets', branch: 'main' },
      setup: 'npm ci',
      profiles: ['tpl-a', b.id, 'tpl-a'],
    })
    assert.equal(res.statusCode, 201)
    const t = res.json()
    assert.match(t.id, /^envt_/)
    assert.deepEqual(t, {
      object: 'environment.template',
      id: t.id,
      name: 'node-app',
      files: [
        { path: 'src/index.js', size_bytes: 15, mode: 0o644 },
        { path: 'run.sh', size_bytes: 10, mode: 0o755 },
      ],
      repo: { full_name: 'acme/widgets', branch: 'main' },
      setup: 'npm ci',
      profiles: [a.id, b.id],
      image: null,
      created_at: t.created_at,
      updated_at: t.created_at,
    })
    assert.equal(res.body.includes(b64('console.log(1)\n')), false)
    const stored = await seedFiles(w(), t.id)
    assert.deepEqual(stored.map((f) => [f.path, Buffer.from(f.content).toString(), f.mode]), [
      ['run.sh', '#!/bin/sh\n', 0o755],
      ['src/index.js', 'console.log(1)\n', 0o644],
    ])
    assert.deepEqual((await get(w(), `/v1/environment-templates/${t.id}`)).json(), t)
    const record = await getTemplateByName(w().store.db, w().orgId, 'node-app')
    assert.deepEqual(record, { id: t.id, name: 'node-app', files: t.files, repo: t.repo, setup: 'npm ci', profiles: [a.id, b.id], image: null })
    assert.equal(await getTemplateByName(w().store.db, w().orgId, 'nope'), null)

    const bare = (await post(w(), 'templates', { name: 'bare' })).json()
    assert.deepEqual([bare.files, bare.repo, bare.setup, bare.profiles], [[], null, null, []])
  })

  it('replaces a template posted under an existing name, keeping its id', async () => {
    const first = (await post(w(), 'templates', { name: 'replace-me', files: [{ path: 'a.txt', content: b64('a') }], setup: 'echo one', repo: { full_name: 'o/r' } })).json()
    await sleep(3)
    const res = await post(w(), 'templates', { name: 'replace-me', files: [{ path: 'b.txt', content: b64('bb') }] })
    assert.equal(res.statusCode, 200)
    const second = res.json()
    assert.equal(second.id, first.id)
    assert.equal(second.created_at, first.created_at)
    assert.ok(second.updated_at > first.updated_at)
    assert.deepEqual([second.files, second.repo, second.setup], [[{ path: 'b.txt', size_bytes: 2, mode: 0o644 }], null, null])
    assert.deepEqual((await seedFiles(w(), first.id)).map((f) => f.path), ['b.txt'])
    const all = (await get(w(), '/v1/environment-templates?limit=100')).json().data.filter((t: { name: string }) => t.name === 'replace-me')
    assert.equal(all.length, 1)
    // Two racing posts of a new name: one creates, the other replaces it.
    const race = await Promise.all([1, 2].map((n) => post(w(), 'templates', { name: 'raced', setup: `echo ${n}` })))
    assert.deepEqual(race.map((r) => r.statusCode).sort(), [200, 201])
    assert.equal(race[0]!.json().id, race[1]!.json().id)
  })

  it('refuses files over the ceilings and stores nothing', async () => {
    const over = Buffer.alloc(5 * 1024 * 1024 + 1, 1)
    const res = await post(w(), 'templates', { name: 'too-big', files: [{ path: 'ok.txt', content: b64('ok') }, { path: 'big.bin', content: over.toString('base64') }] })
    assert.equal(res.statusCode, 400)
    assert.match(errorOf(res).message, /files\[1\].*5 MiB/)
    assert.equal(await getTemplateByName(w().store.db, w().orgId, 'too-big'), null)

    const chunk = Buffer.alloc(3.5 * 1024 * 1024, 2).toString('base64')
    const total = await post(w(), 'templates', { name: 'too-big', files: ['a', 'b', 'c'].map((p) => ({ path: p, content: chunk })) })
    assert.equal(total.statusCode, 400)
    assert.match(errorOf(total).message, /10 MiB/)
    assert.equal(await getTemplateByName(w().store.db, w().orgId, 'too-big'), null)

    // A refused replacement leaves the previous template and its files as they were.
    const kept = (await post(w(), 'templates', { name: 'kept', files: [{ path: 'keep.txt', content: b64('keep') }] })).json()
    const bad = await post(w(), 'templates', { name: 'kept', files: [{ path: 'big.bin', content: over.toString('base64') }] })
    assert.equal(bad.statusCode, 400)
    assert.deepEqual((await get(w(), `/v1/environment-templates/${kept.id}`)).json(), kept)
    assert.deepEqual((await seedFiles(w(), kept.id)).map((f) => f.path), ['keep.txt'])

    for (const files of [[{ path: '../escape', content: b64('x') }], [{ path: '/abs', content: b64('x') }], [{ path: 'x', content: '!!!' }], [{ path: 'x', content: b64('x'), owner: 'root' }]]) {
      const r = await post(w(), 'templates', { name: 'bad-files', files })
      assert.equal(r.statusCode, 400, JSON.stringify(files))
      assert.match(errorOf(r).message, /files\[0\]/)
    }
  })

  it('refuses unknown profiles and malformed repos, naming them', async () => {
    const unknown = await post(w(), 'templates', { name: 'bad-profile', profiles: ['ghost-profile'] })
    assert.equal(unknown.statusCode, 400)
    assert.match(errorOf(unknown).message, /"ghost-profile"/)
    const { token } = await w().mint()
    const foreign = (await post(w(), 'profiles', { name: 'foreign', env: {} }, token)).json()
    assert.match(errorOf(await post(w(), 'templates', { name: 'bad-profile', profiles: [foreign.id] })).message, new RegExp(foreign.id))
    for (const full_name of ['no-slash', 'a/b/c', '../..', 'a/..', 'a b/c', '']) {
      const r = await post(w(), 'templates', { name: 'bad-repo', repo: { full_name } })
      assert.equal(r.statusCode, 400, full_name)
      assert.match(errorOf(r).message, /full_name/)
    }
    assert.match(errorOf(await post(w(), 'templates', { name: 'bad-repo', repo: { full_name: 'a/b', tag: 'v1' } })).message, /Unknown field "repo.tag"/)
    assert.equal(await getTemplateByName(w().store.db, w().orgId, 'bad-profile'), null)
    assert.equal(await getTemplateByName(w().store.db, w().orgId, 'bad-repo'), null)
  })

  it('holds at most 25 templates per organization; replacing one still works at the limit', async () => {
    const { token } = await w().mint()
    for (let i = 0; i < 25; i++) assert.equal((await post(w(), 'templates', { name: `t${i}` }, token)).statusCode, 201)
    const extra = await post(w(), 'templates', { name: 't25' }, token)
    assert.equal(extra.statusCode, 400)
    assert.equal(errorOf(extra).code, 'invalid_request')
    assert.match(errorOf(extra).message, /25/)
    assert.equal((await post(w(), 'templates', { name: 't7', setup: 'true' }, token)).statusCode, 200)
    const gone = (await get(w(), '/v1/environment-templates?limit=1', token)).json().data[0]
    await w().inject({ method: 'DELETE', url: `/v1/environment-templates/${gone.id}`, token })
    assert.equal((await post(w(), 'templates', { name: 't25' }, token)).statusCode, 201)
  })

  it('lists with limit, after, has_more and order; an unplaceable cursor gives an empty page', async () => {
    const { token } = await w().mint()
    const ids: string[] = []
    for (const name of ['x', 'y', 'z']) {
      ids.push((await post(w(), 'templates', { name }, token)).json().id)
      await sleep(3)
    }
    const p1 = (await get(w(), '/v1/environment-templates?limit=2', token)).json()
    assert.deepEqual([p1.data.map((t: { id: string }) => t.id), p1.has_more, p1.last_id], [[ids[2], ids[1]], true, ids[1]])
    const p2 = (await get(w(), `/v1/environment-templates?limit=2&after=${ids[1]}`, token)).json()
    assert.deepEqual([p2.data.map((t: { id: string }) => t.id), p2.has_more], [[ids[0]], false])
    const asc = (await get(w(), '/v1/environment-templates?order=asc', token)).json()
    assert.deepEqual(asc.data.map((t: { id: string }) => t.id), ids)
    assert.deepEqual((await get(w(), '/v1/environment-templates?after=envt_never', token)).json(), { object: 'list', data: [], has_more: false, last_id: '' })
    assert.equal((await get(w(), '/v1/environment-templates?order=up', token)).statusCode, 400)
  })

  it('deletes a template with its files', async () => {
    const t = (await post(w(), 'templates', { name: 'doomed', files: [{ path: 'f', content: b64('f') }] })).json()
    const res = await w().inject({ method: 'DELETE', url: `/v1/environment-templates/${t.id}` })
    assert.deepEqual(res.json(), { object: 'environment.template.deleted', id: t.id, deleted: true })
    assert.deepEqual(await seedFiles(w(), t.id), [])
    assert.equal((await get(w(), `/v1/environment-templates/${t.id}`)).statusCode, 404)
    assert.equal((await w().inject({ method: 'DELETE', url: `/v1/environment-templates/${t.id}` })).statusCode, 404)
  })

  describe('isolation and scopes', () => {
    it("answers another organization's template like a missing one", async () => {
      const t = (await post(w(), 'templates', { name: 'ours' })).json()
      const other = await w().mint()
      for (const method of ['GET', 'DELETE'] as const) {
        const theirs = await w().inject({ method, url: `/v1/environment-templates/${t.id}`, token: other.token })
        const missing = await w().inject({ method, url: '/v1/environment-templates/envt_missing', token: other.token })
        assert.equal(theirs.statusCode, 404)
        assert.equal(errorOf(theirs).message.replace(t.id, 'ID'), errorOf(missing).message.replace('envt_missing', 'ID'))
      }
      // The same name in another organization is a separate template.
      assert.equal((await post(w(), 'templates', { name: 'ours' }, other.token)).statusCode, 201)
    })

    it('needs environments:write to change and environments:read to read', async () => {
      const reader = await w().mint(undefined, ['environments:read'])
      const writer = await w().mint(undefined, ['environments:write'])
      const denied = await post(w(), 'templates', { name: 'n' }, reader.token)
      assert.equal(denied.statusCode, 403)
      assert.match(errorOf(denied).message, /environments:write/)
      const read = await get(w(), '/v1/environment-templates', writer.token)
      assert.equal(read.statusCode, 403)
      assert.match(errorOf(read).message, /environments:read/)
    })

    it('describes every route in the OpenAPI document', async () => {
      const doc = (await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })).json()
      const ops = Object.values(doc.paths as Record<string, Record<string, { operationId: string }>>).flatMap((p) => Object.values(p).map((o) => o.operationId))
      for (const id of ['createEnvironmentProfile', 'listEnvironmentProfiles', 'getEnvironmentProfile', 'deleteEnvironmentProfile', 'putEnvironmentTemplate', 'listEnvironmentTemplates', 'getEnvironmentTemplate', 'deleteEnvironmentTemplate']) {
        assert.ok(ops.includes(id), id)
      }
    })
  })
})
