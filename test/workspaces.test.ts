import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { errorOf, forEachDialect, useWarren, type Warren } from './harness.ts'
import { connectModel, hasEvent, items, waitFor } from './fixtures.ts'
import { hostWorkspace } from './host-workspace.ts'

const b64 = (s: string) => Buffer.from(s).toString('base64')

async function session(w: Warren, payload: object = {}): Promise<{ id: string }> {
  const res = await w.inject({ method: 'POST', url: '/v1/sessions', payload })
  assert.equal(res.statusCode, 201, res.body)
  return res.json()
}

const state = async (w: Warren, id: string) => (await w.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json().environment.state as string

/** A real repository served from a file:// base, as WARREN_GIT_BASE_URL points at it. */
function makeGitBase(): string {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-git-'))
  const work = path.join(base, 'work')
  fs.mkdirSync(work)
  const git = (...args: string[]) => execFileSync('git', args, { cwd: work, env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' } })
  git('init', '-q', '-b', 'trunk')
  fs.writeFileSync(path.join(work, 'README.md'), '# widgets\n')
  git('add', '.')
  git('commit', '-q', '-m', 'first')
  fs.mkdirSync(path.join(base, 'acme'))
  execFileSync('git', ['clone', '-q', '--bare', work, path.join(base, 'acme', 'widgets.git')])
  return base
}

forEachDialect('workspaces', (dialect) => {
  const gitBase = makeGitBase()
  after(() => fs.rmSync(gitBase, { recursive: true, force: true }))
  const w = useWarren(dialect, {
    env: { WARREN_GIT_BASE_URL: `file://${gitBase}`, WARREN_RATE_SESSIONS_PER_MIN: '1000', WARREN_RATE_GENERAL_PER_MIN: '100000', WARREN_IDLE_PAUSE_MS: '600000' },
  })
  before(async () => {
    await connectModel(w())
  })

  it('comes up in the background after the 201, with sandbox.created and state running', async () => {
    const s = await session(w())
    await hasEvent(w(), s.id, 'sandbox.created')
    const created = (await items(w(), s.id)).find((i) => i.detail.event === 'sandbox.created')!
    assert.equal(created.type, 'sandbox')
    assert.deepEqual(created.detail, { event: 'sandbox.created', state: 'running' })
    assert.equal(await state(w(), s.id), 'running')
    const dir = hostWorkspace(w(), s.id)
    assert.ok(fs.statSync(dir).isDirectory())
    const del = await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
    assert.equal(del.statusCode, 200)
    assert.equal(fs.existsSync(dir), false, 'DELETE removes the workspace files at once')
  })

  it('seeds files, clones the repository, runs the setup once with profile variables, and records what failed', async () => {
    const profile = (await w().inject({ method: 'POST', url: '/v1/environment-profiles', payload: { name: `p${Date.now()}`, env: { MY_SECRET: 'zebra-42' } } })).json()
    const tpl = await w().inject({
      method: 'POST',
      url: '/v1/environment-templates',
      payload: { name: `t${Date.now()}`, setup: 'echo "$MY_SECRET" > from-setup.txt; id -u > uid.txt', profiles: [profile.id] },
    })
    assert.ok(tpl.statusCode < 300, tpl.body)
    const s = await session(w(), {
      environment: {
        template: tpl.json().name,
        repo: { full_name: 'acme/widgets' },
        files: [
          { path: 'notes/a.txt', content: b64('seeded'), mode: 0o600 },
          { path: 'README.md', content: b64('not over the clone') },
          { path: 'notes/a.txt/inside', content: b64('cannot: a.txt is a file') },
        ],
      },
    })
    await hasEvent(w(), s.id, 'agent.error')
    const dir = hostWorkspace(w(), s.id)
    await waitFor('setup output', async () => fs.existsSync(path.join(dir, 'uid.txt')))
    assert.equal(fs.readFileSync(path.join(dir, 'notes/a.txt'), 'utf8'), 'seeded')
    assert.equal(fs.statSync(path.join(dir, 'notes/a.txt')).mode & 0o777, 0o600)
    assert.equal(fs.readFileSync(path.join(dir, 'README.md'), 'utf8'), '# widgets\n', 'seed files never overwrite what is there')
    assert.equal(fs.readFileSync(path.join(dir, 'from-setup.txt'), 'utf8'), 'zebra-42\n', 'profile variables reach workspace processes')
    assert.notEqual(fs.readFileSync(path.join(dir, 'uid.txt'), 'utf8').trim(), '0')
    assert.notEqual(fs.statSync(path.join(dir, 'README.md')).uid, 0, 'cloned files belong to the workspace, not root')
    const errors = (await items(w(), s.id)).filter((i) => i.detail.event === 'agent.error')
    assert.equal(errors.length, 1)
    assert.equal(errors[0]!.type, 'error')
    assert.equal(errors[0]!.detail.path, 'notes/a.txt/inside')
    assert.match(String(errors[0]!.detail.message), /notes\/a\.txt\/inside/)
    const got = (await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}` }))
    assert.deepEqual(got.json().environment.repo, { full_name: 'acme/widgets', branch: 'trunk', clone_error: null })
    for (const body of [got.body, (await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}/items?limit=100` })).body]) {
      assert.ok(!body.includes('zebra-42'), 'profile values never appear in a response or event')
    }
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })

  it('records a failed clone in environment.repo.clone_error and keeps the session open', async () => {
    const s = await session(w(), { environment: { repo: { full_name: 'acme/missing', branch: 'main' } } })
    const repo = await waitFor('clone_error', async () => {
      const r = (await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}` })).json().environment.repo
      return r.clone_error ? r : null
    })
    assert.equal(repo.full_name, 'acme/missing')
    assert.match(repo.clone_error, /missing|not found|does not exist|repository/i)
    assert.equal(await state(w(), s.id), 'running')
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })

  it('uploads files all or nothing, refusing paths that leave the workspace, symlinks included', async () => {
    const tpl = (await w().inject({ method: 'POST', url: '/v1/environment-templates', payload: { name: `link${Date.now()}`, setup: 'ln -s /etc escape && ln -s .. up' } })).json()
    const s = await session(w(), { environment: { template: tpl.name } })
    const dir = hostWorkspace(w(), s.id)
    await waitFor('planted link', async () => fs.existsSync(path.join(dir, 'up')))
    const ok = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, payload: { files: [{ path: 'src/main.txt', content: b64('hello'), mode: 0o755 }] } })
    assert.equal(ok.statusCode, 200, ok.body)
    assert.deepEqual(ok.json().data, [{ path: 'src/main.txt', size_bytes: 5 }])
    assert.equal(fs.readFileSync(path.join(dir, 'src/main.txt'), 'utf8'), 'hello')
    assert.notEqual(fs.statSync(path.join(dir, 'src/main.txt')).uid, 0)
    for (const bad of ['escape/evil', 'up/evil', '../evil', '/tmp/evil']) {
      const res = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, payload: { files: [{ path: 'first.txt', content: b64('1') }, { path: bad, content: b64('x') }] } })
      assert.equal(res.statusCode, 400, `${bad}: ${res.body}`)
      assert.equal(errorOf(res).code, 'invalid_request')
      assert.equal(fs.existsSync(path.join(dir, 'first.txt')), false, `${bad}: nothing half done`)
    }
    assert.equal(fs.existsSync('/etc/evil'), false)
    const big = Buffer.alloc(5 * 1024 * 1024 + 1).toString('base64')
    const tooBig = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, payload: { files: [{ path: 'big', content: big }] } })
    assert.equal(tooBig.statusCode, 400)
    const outsider = await w().mint()
    const foreign = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, token: outsider.token, payload: { files: [] } })
    assert.equal(foreign.statusCode, 404)
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })

  it('a sandbox that died behind the service (destroyed from outside) closes its usage interval before a new one opens', async () => {
    const s = await session(w())
    await hasEvent(w(), s.id, 'sandbox.created')
    const sb = await w().workspaces.live(s.id)
    assert.ok(sb, 'the sandbox is live')
    // As when its cgroups are removed by another process: the sandbox ends without the manager's doing.
    await sb.destroy()
    const up = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, payload: { files: [{ path: 'again.txt', content: b64('again') }] } })
    assert.equal(up.statusCode, 200, up.body)
    const rows = await w().store.db.selectFrom('usage_intervals').selectAll().where('session_id', '=', s.id).orderBy('started_at').execute()
    assert.equal(rows.length, 2, 'a new sandbox opens a new interval')
    assert.notEqual(rows[0]!.ended_at, null, 'the dead sandbox\'s interval is closed')
    assert.equal(rows[1]!.ended_at, null, 'the new sandbox\'s interval is open')
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })

  it('reports usage: intervals, seconds, and a deleted session stays readable', async () => {
    const s = await session(w())
    await hasEvent(w(), s.id, 'sandbox.created')
    const live = (await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}/usage` })).json()
    assert.equal(live.object, 'session.usage')
    assert.equal(live.scope, 'session')
    assert.equal(live.intervals, 1)
    assert.equal(live.sessions, 1)
    assert.equal(live.needs_review_intervals, 0)
    assert.equal(live.chargeable_seconds, 0, 'a running interval is not reconciled yet')
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
    const after = await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}/usage?root=${s.id}` })
    assert.equal(after.statusCode, 200)
    assert.equal(after.json().scope, 'tree')
    assert.equal(after.json().intervals, 1)
    assert.ok(after.json().chargeable_seconds <= after.json().sandbox_seconds)
    const rows = await w().store.db.selectFrom('usage_intervals').selectAll().where('session_id', '=', s.id).execute()
    assert.equal(rows.length, 1)
    assert.notEqual(rows[0]!.ended_at, null, 'DELETE closes the interval')
    assert.equal(rows[0]!.reconciled, 1)
    const wrongRoot = await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}/usage?root=ses_other` })
    assert.equal(wrongRoot.statusCode, 400)
  })
})

forEachDialect('workspace lifecycle timers', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_IDLE_PAUSE_MS: '300', WARREN_WORKSPACE_LIFETIME_MS: '600000', WARREN_RATE_GENERAL_PER_MIN: '100000' } })
  before(async () => {
    await connectModel(w())
  })

  it('pauses when idle, resumes on upload, moves updated_at, and keeps processes frozen meanwhile', async () => {
    const tpl = (await w().inject({ method: 'POST', url: '/v1/environment-templates', payload: { name: `tick${Date.now()}`, setup: '(while true; do date +%s%N > tick; sleep 0.05; done) >/dev/null 2>&1 &' } })).json()
    const s = await session(w(), { environment: { template: tpl.name } })
    await hasEvent(w(), s.id, 'sandbox.paused')
    assert.equal(await state(w(), s.id), 'paused')
    const dir = hostWorkspace(w(), s.id)
    const frozen = fs.readFileSync(path.join(dir, 'tick'), 'utf8')
    await new Promise((r) => setTimeout(r, 200))
    assert.equal(fs.readFileSync(path.join(dir, 'tick'), 'utf8'), frozen, 'nothing runs while paused')
    const beforeUpdate = (await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}` })).json().updated_at
    const up = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, payload: { files: [{ path: 'wake.txt', content: b64('x') }] } })
    assert.equal(up.statusCode, 200, up.body)
    await hasEvent(w(), s.id, 'sandbox.resumed')
    await waitFor('ticking again', async () => fs.readFileSync(path.join(dir, 'tick'), 'utf8') !== frozen)
    const after = (await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}` })).json()
    assert.ok(after.updated_at > beforeUpdate, 'waking moves updated_at')
    await hasEvent(w(), s.id, 'sandbox.paused', 2)
    const usage = (await w().inject({ method: 'GET', url: `/v1/sessions/${s.id}/usage` })).json()
    assert.equal(usage.intervals, 2, 'one interval per running stretch')
    assert.equal(usage.chargeable_seconds, usage.sandbox_seconds, 'closed intervals are reconciled')
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })
})

forEachDialect('workspace lifetime ceiling', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_IDLE_PAUSE_MS: '600000', WARREN_WORKSPACE_LIFETIME_MS: '800', WARREN_RATE_GENERAL_PER_MIN: '100000' } })
  before(async () => {
    await connectModel(w())
  })

  it('reclaims the sandbox after its running time, keeps the files, and restores them on the next input', async () => {
    const s = await session(w(), { environment: { files: [{ path: 'keep.txt', content: b64('kept') }] } })
    await waitFor('reclaimed', async () => (await state(w(), s.id)) === 'reclaimed')
    const dir = hostWorkspace(w(), s.id)
    // Through the seam: a reclaimed workspace's own file system is mounted again only when used.
    assert.equal((await w().workspaces.files(s.id).readFile('keep.txt'))?.toString(), 'kept')
    const up = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, payload: { files: [{ path: 'again.txt', content: b64('y') }] } })
    assert.equal(up.statusCode, 200, up.body)
    await hasEvent(w(), s.id, 'sandbox.created', 2)
    assert.equal(fs.readFileSync(path.join(dir, 'keep.txt'), 'utf8'), 'kept', 'the restore keeps the files')
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })

  it('emits workspace.recovery_failed when the kept files are gone', async () => {
    const s = await session(w())
    await waitFor('reclaimed', async () => (await state(w(), s.id)) === 'reclaimed')
    fs.rmSync(hostWorkspace(w(), s.id), { recursive: true, force: true })
    const up = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, payload: { files: [{ path: 'x', content: b64('x') }] } })
    assert.equal(up.statusCode, 500, up.body)
    assert.equal(errorOf(up).code, 'workspace_recovery_failed')
    await hasEvent(w(), s.id, 'workspace.recovery_failed')
    const failed = (await items(w(), s.id)).find((i) => i.detail.event === 'workspace.recovery_failed')!
    assert.equal(failed.type, 'error')
    assert.match(String(failed.detail.message), /restored/)
    assert.equal(await state(w(), s.id), 'failed')
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${s.id}` })
  })
})
