import { it } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { PG_URL, forEachDialect, startWarren, useWarren, type Warren } from './harness.ts'
import { expectError } from './expect.ts'
import { SCOPES } from '../src/tokens/scopes.ts'
import { ROOT, serviceProcess } from './service-process.ts'
import { storeLocation } from '../src/db/database.ts'

const BIN = path.join(ROOT, 'bin', 'warren')
const DAY = 86_400_000

type Run = { code: number; stdout: string; stderr: string }

/** Runs bin/warren as a child process against the given store; never throws on a non-zero exit. */
function warren(args: string[], store: { dataDir: string; databaseUrl?: string }): Promise<Run> {
  const env: NodeJS.ProcessEnv = { ...process.env, WARREN_DATA_DIR: store.dataDir, DATABASE_URL: store.databaseUrl ?? '' }
  return new Promise((resolve) => {
    execFile(BIN, args, { env, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0
      resolve({ code, stdout, stderr })
    })
  })
}

/** Where the CLI must write to reach the running test service: its data folder, or its PostgreSQL schema. */
function storeOf(w: Warren): { dataDir: string; databaseUrl?: string } {
  if (w.dialect === 'sqlite') return { dataDir: w.dataDir }
  const options = encodeURIComponent(`-c search_path=${w.pgSchema}`)
  return { dataDir: w.dataDir, databaseUrl: `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}options=${options}` }
}

type Minted = { id: string; token: string; org_id: string; scopes: string[]; expires_at: number }

/** Parses the single JSON line `tokens create` prints. */
function mintedFrom(run: Run): Minted {
  assert.equal(run.code, 0, `exit ${run.code}: ${run.stderr}`)
  const lines = run.stdout.split('\n').filter((l) => l.trim() !== '')
  assert.equal(lines.length, 1, `expected one line, got: ${run.stdout}`)
  const out = JSON.parse(lines[0]!) as Minted
  assert.deepEqual(Object.keys(out).sort(), ['expires_at', 'id', 'org_id', 'scopes', 'token'])
  return out
}

const health = (w: Warren, token: string) => w.inject({ method: 'GET', url: '/v1/health', token })

/** The test process's environment with nothing that points a child at a store. */
function withoutStore(): NodeJS.ProcessEnv {
  const env = { ...process.env }
  for (const k of Object.keys(env)) if (k.startsWith('WARREN_') || k === 'DATABASE_URL') delete env[k]
  return env
}

/** Runs a command with the given working folder and environment; never throws on a non-zero exit. */
function runIn(file: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { cwd, env, timeout: 60_000 }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }))
  })
}

/** A Warren installation of its own (this one's sources and bin, its packages linked), so its default store is the test's. */
function installation(): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-install-'))
  for (const part of ['src', 'bin', 'package.json', 'sdk/src', 'sdk/package.json']) fs.cpSync(path.join(ROOT, part), path.join(root, part), { recursive: true })
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(root, 'node_modules'))
  // The client commands use the SDK from its sources, with its own packages.
  fs.symlinkSync(path.join(ROOT, 'sdk', 'node_modules'), path.join(root, 'sdk', 'node_modules'))
  return root
}

it('from any folder, tokens create writes to the store the service uses by default, says which, and the service accepts the token [sqlite]', async () => {
  const root = installation()
  const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-cwd-'))
  const svc = serviceProcess({ WARREN_SANDBOX_PREFIX: `c${Math.random().toString(36).slice(2, 6)}` }, { root, cwd: os.tmpdir() })
  try {
    const run = await runIn(path.join(root, 'bin', 'warren'), ['tokens', 'create', '--org', 'acme', '--days', '7'], elsewhere, withoutStore())
    const out = mintedFrom(run)
    const db = path.join(root, '.warren', 'warren.db')
    assert.equal(fs.existsSync(path.join(elsewhere, '.warren')), false, 'a store was made in the folder the CLI ran from')
    assert.ok(fs.existsSync(db), 'the installation’s default store was not written')
    assert.ok(run.stderr.includes(db), `stderr does not name the store: ${run.stderr}`)
    // The service, started from yet another folder, meets the same store.
    await svc.start()
    const res = await svc.api('GET', '/v1/health', undefined, out.token)
    assert.equal(res.status, 200, res.text)
    assert.equal(res.body.token_id, out.id)
  } finally {
    if (svc.running) await svc.stop('SIGTERM')
    fs.rmSync(root, { recursive: true, force: true })
    fs.rmSync(elsewhere, { recursive: true, force: true })
  }
})

it('a relative WARREN_DATA_DIR is relative to the folder the command runs in, as any path typed there [sqlite]', async () => {
  const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-cwd-'))
  try {
    const run = await runIn(BIN, ['tokens', 'create', '--org', 'acme', '--days', '7'], elsewhere, { ...withoutStore(), WARREN_DATA_DIR: 'mine' })
    mintedFrom(run)
    const db = path.join(fs.realpathSync(elsewhere), 'mine', 'warren.db')
    assert.ok(fs.existsSync(db))
    assert.ok(run.stderr.includes(db), `stderr does not name the store: ${run.stderr}`)
  } finally {
    fs.rmSync(elsewhere, { recursive: true, force: true })
  }
})

it('names a PostgreSQL store by host, database, schema and user, never its password', () => {
  const where = storeLocation({ dataDir: '/unused', databaseUrl: 'postgres://warren:s3cr%40t@db.example:6543/prod?options=-c%20search_path%3Dtenant' })
  assert.equal(where, 'PostgreSQL db.example:6543/prod (schema tenant) as warren')
  assert.equal(storeLocation({ dataDir: '/unused', databaseUrl: 'postgresql://ops@db.example' }), 'PostgreSQL db.example:5432/ops as ops')
  assert.equal(storeLocation({ dataDir: 'rel' }), `SQLite ${path.resolve('rel', 'warren.db')}`)
})

it('an unknown command, or none, exits non-zero and says so [sqlite]', async () => {
  for (const args of [['bogus'], ['sessions', 'bogus'], ['tokens', 'bogus'], [], ['tokens'], ['sessions']]) {
    const run = await runIn(BIN, args, os.tmpdir(), withoutStore())
    assert.notEqual(run.code, 0, `warren ${args.join(' ')} exited 0`)
    assert.equal(run.stdout, '', `warren ${args.join(' ')} printed on stdout`)
    assert.match(run.stderr, args.length <= 1 && args[0] !== 'bogus' ? /Usage: warren/ : /unknown command/, run.stderr)
  }
  // A client command with no token to send says where one comes from.
  const env = { ...withoutStore(), WARREN_CONFIG: path.join(os.tmpdir(), `warren-no-config-${process.pid}.json`) }
  const run = await runIn(BIN, ['sessions', 'list'], os.tmpdir(), env)
  assert.equal(run.code, 1)
  assert.match(run.stderr, /^warren: no token: set WARREN_TOKEN, pass --token, or run `warren login/)
})

it('npx warren prints nothing of its own: the machine\'s Node need not be 24, the project brings its own [sqlite]', async () => {
  // npx links the project into its cache on a first call (a fresh cache here), checking the
  // project's engines against the machine's Node: it printed a warning of five lines, twice.
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-npx-cache-'))
  try {
    for (let call = 1; call <= 2; call++) {
      const run = await runIn('npx', ['--offline', 'warren', '--help'], ROOT, { ...withoutStore(), npm_config_cache: cache })
      assert.equal(run.code, 0, run.stderr)
      assert.match(run.stdout, /^Usage: warren/)
      assert.equal(run.stderr, '', `call ${call}`)
    }
  } finally {
    fs.rmSync(cache, { recursive: true, force: true })
  }
})

it('mints into a fresh data folder, which a service started on it then accepts [sqlite]', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-cli-'))
  try {
    const before = Date.now()
    const out = mintedFrom(await warren(['tokens', 'create', '--org', 'acme', '--scopes', 'sessions:read', '--days', '7'], { dataDir }))
    const after = Date.now()
    assert.match(out.id, /^tok_/)
    assert.ok(out.token.startsWith('svc_pat_'))
    assert.match(out.org_id, /^org_/)
    assert.deepEqual(out.scopes, ['sessions:read'])
    assert.ok(out.expires_at >= before + 7 * DAY && out.expires_at <= after + 7 * DAY, `expires_at ${out.expires_at}`)
    const w = await startWarren('sqlite', { dataDir })
    try {
      const res = await health(w, out.token)
      assert.equal(res.statusCode, 200, res.body)
      const { node, ...shown } = res.json()
      assert.deepEqual(shown, { object: 'health', status: 'ok', org_id: out.org_id, token_id: out.id, scopes: ['sessions:read'] })
      assert.equal(node.id, w.node.id)
      expectError(await w.inject({ method: 'GET', url: '/v1/tokens', token: out.token }), 403, 'permission_denied')
    } finally {
      await w.close()
    }
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
})

forEachDialect('warren tokens (CLI)', (dialect) => {
  const w = useWarren(dialect)

  it('mints a token the running service accepts, reusing the organization by name', async () => {
    const org = `cli-${Math.random().toString(36).slice(2)}`
    const first = await warren(['tokens', 'create', '--org', org, '--scopes', 'sessions:read,tokens:write', '--days', '30'], storeOf(w()))
    const a = mintedFrom(first)
    // stderr names the store written to: the service's own.
    if (dialect === 'sqlite') assert.equal(first.stderr, `warren: token ${a.id} written to SQLite ${path.join(w().dataDir, 'warren.db')}\n`)
    else assert.ok(first.stderr.startsWith(`warren: token ${a.id} written to PostgreSQL `) && first.stderr.includes(`(schema ${w().pgSchema})`), first.stderr)
    const b = mintedFrom(await warren(['tokens', 'create', '--org', org], storeOf(w())))
    assert.equal(a.org_id, b.org_id, 'a second mint for the same name made another organization')
    assert.notEqual(a.id, b.id)
    assert.notEqual(a.token, b.token)
    assert.deepEqual(b.scopes, [...SCOPES], 'default scopes are not all scopes')
    assert.ok(Math.abs(b.expires_at - (Date.now() + 90 * DAY)) < 60_000, 'default lifetime is not 90 days')
    assert.ok(Math.abs(a.expires_at - (Date.now() + 30 * DAY)) < 60_000)
    const h = await health(w(), a.token)
    assert.equal(h.statusCode, 200, h.body)
    assert.deepEqual(h.json().scopes, ['sessions:read', 'tokens:write'])
    // Both are listed in their organization, and nowhere else.
    const listed = (await w().inject({ method: 'GET', url: '/v1/tokens', token: a.token })).json().data.map((t: { id: string }) => t.id)
    assert.deepEqual([...listed].sort(), [a.id, b.id].sort())
    assert.ok(!(await w().inject({ method: 'GET', url: '/v1/tokens' })).json().data.some((t: { id: string }) => t.id === a.id))
  })

  it('revokes by id: the token is refused with 401 at once', async () => {
    const out = mintedFrom(await warren(['tokens', 'create', '--org', 'cli-revoke', '--days', '7'], storeOf(w())))
    assert.equal((await health(w(), out.token)).statusCode, 200)
    const run = await warren(['tokens', 'revoke', out.id], storeOf(w()))
    assert.equal(run.code, 0, run.stderr)
    assert.deepEqual(JSON.parse(run.stdout.trim()), { id: out.id, revoked: true })
    expectError(await health(w(), out.token), 401, 'authentication_error')
  })

  it('exits non-zero with a clear message on an unknown token id', async () => {
    const run = await warren(['tokens', 'revoke', 'tok_never_issued'], storeOf(w()))
    assert.notEqual(run.code, 0)
    assert.match(run.stderr, /tok_never_issued/)
    assert.equal(run.stdout, '')
  })

  it('refuses a bad lifetime, an unknown scope and a missing organization, minting nothing', async () => {
    const count = async () => Number((await w().store.db.selectFrom('tokens').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n)
    const before = await count()
    const cases: [string[], RegExp][] = [
      [['--org', 'x', '--days', '10'], /7, 30 or 90/],
      [['--org', 'x', '--days', 'week'], /7, 30 or 90/],
      [['--org', 'x', '--scopes', 'sessions:read,root'], /unknown scope.*root/],
      [['--org', 'x', '--scopes', ''], /scope/],
      [['--days', '7'], /--org/],
      [['--org', ' ', '--days', '7'], /organization name/],
    ]
    for (const [args, message] of cases) {
      const run = await warren(['tokens', 'create', ...args], storeOf(w()))
      assert.notEqual(run.code, 0, `${args.join(' ')} exited 0`)
      assert.match(run.stderr, message, `${args.join(' ')}: ${run.stderr}`)
      assert.equal(run.stdout, '', `${args.join(' ')} printed a token`)
    }
    assert.equal(await count(), before)
  })

  it('treats a repeated scope as one', async () => {
    const out = mintedFrom(await warren(['tokens', 'create', '--org', 'cli-dup', '--scopes', 'sessions:read, sessions:read', '--days', '7'], storeOf(w())))
    assert.deepEqual(out.scopes, ['sessions:read'])
    assert.deepEqual((await health(w(), out.token)).json().scopes, ['sessions:read'])
  })

  it('stores only a hash of the secret', async () => {
    const out = mintedFrom(await warren(['tokens', 'create', '--org', 'cli-hash', '--days', '7'], storeOf(w())))
    const row = await w().store.db.selectFrom('tokens').selectAll().where('id', '=', out.id).executeTakeFirstOrThrow()
    const stored = JSON.stringify(row)
    const random = out.token.slice('svc_pat_'.length)
    assert.ok(!stored.includes(random), 'the secret is stored')
    assert.ok(!stored.includes(random.slice(0, 16)), 'part of the secret is stored')
    assert.notEqual(row.hash, out.token)
    // Tokens minted over HTTP are stored the same way.
    const http = (await w().inject({ method: 'POST', url: '/v1/tokens', payload: { scopes: ['sessions:read'], expires_in_days: 7 } })).json()
    const httpRow = await w().store.db.selectFrom('tokens').selectAll().where('id', '=', http.id).executeTakeFirstOrThrow()
    assert.ok(!JSON.stringify(httpRow).includes(http.token.slice('svc_pat_'.length)))
  })
})
