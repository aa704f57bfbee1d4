// The client commands (`warren login|sessions|send|watch|approve|answer|files|artifacts|preview|
// usage`) against the running service with a fake model: through a real terminal (tmux) where a
// person answers the agent at the prompt, and without one, the way a script runs them (--json).
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFile, execFileSync, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { startWarren, type Warren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { ACTIONS_ENV } from './turn-actions-helpers.ts'
import { ROOT } from './service-process.ts'

const BIN = path.join(ROOT, 'bin', 'warren')
type Run = { code: number; stdout: string; stderr: string }

describe('warren client commands', () => {
  let w: Warren
  let fake: FakeModelServer
  let base: string
  let dir: string
  let env: NodeJS.ProcessEnv
  const tmuxSessions: string[] = []

  /** Runs bin/warren with no terminal (stdin closed), as a script would, as the user `as` describes. */
  const runAs =
    (as: () => NodeJS.ProcessEnv) =>
    (...args: string[]): Promise<Run> =>
      new Promise((resolve) => {
        const child = execFile(BIN, args, { env: as(), timeout: 90_000 }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }))
        child.stdin?.end()
      })
  const warren = runAs(() => env)
  const json = async (...args: string[]) => {
    const r = await warren(...args, '--json')
    assert.equal(r.code, 0, `warren ${args.join(' ')}: ${r.stderr}`)
    return JSON.parse(r.stdout)
  }

  /** Starts `command` in a detached tmux terminal; returns a reader of its screen and its exit code. */
  function terminal(command: string) {
    const name = `warren-cli-${randomBytes(4).toString('hex')}`
    const exitFile = path.join(dir, `${name}.exit`)
    const envs = Object.entries({ WARREN_CONFIG: env.WARREN_CONFIG!, PATH: env.PATH! }).map(([k, v]) => `${k}='${v}'`).join(' ')
    execFileSync('tmux', ['new-session', '-d', '-s', name, '-x', '200', '-y', '50', `env ${envs} ${command}; echo $? > ${exitFile}; sleep 600`])
    tmuxSessions.push(name)
    const screen = () => execFileSync('tmux', ['capture-pane', '-p', '-J', '-S', '-200', '-t', name], { encoding: 'utf8' })
    return {
      screen,
      shows: (text: string | RegExp, what = String(text)) => waitFor(`the terminal shows ${what}`, async () => (typeof text === 'string' ? screen().includes(text) : text.test(screen())) && screen(), 60_000).catch((err: Error) => {
        throw new Error(`${err.message}\n--- screen ---\n${screen()}`)
      }),
      keys: (...keys: string[]) => execFileSync('tmux', ['send-keys', '-t', name, ...keys]),
      exit: () =>
        waitFor('the command exits', async () => (fs.existsSync(exitFile) && fs.readFileSync(exitFile, 'utf8').trim() !== '' ? { code: Number(fs.readFileSync(exitFile, 'utf8').trim()) } : undefined), 60_000).then(
          (r) => r.code,
          (err: Error) => {
            throw new Error(`${err.message}\n--- screen ---\n${screen()}`)
          },
        ),
    }
  }

  before(async () => {
    w = await startWarren('sqlite', { env: ACTIONS_ENV })
    base = await w.listen()
    fake = await startModelServer({ models: ['m1'] })
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-cli-'))
    env = { PATH: process.env.PATH, HOME: dir, WARREN_CONFIG: path.join(dir, 'config.json') }
    // The other tests' user has signed in already (the login test signs in a user of its own).
    fs.writeFileSync(env.WARREN_CONFIG!, JSON.stringify({ url: base, token: w.token }), { mode: 0o600 })
    const res = await w.inject({ method: 'POST', url: '/v1/model-credentials', payload: { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] } })
    assert.equal(res.statusCode, 201, res.body)
  })
  after(async () => {
    for (const s of tmuxSessions) execFileSync('tmux', ['kill-session', '-t', s], { stdio: 'ignore' })
    await w?.close()
    await fake?.close()
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('login keeps the address and token for the user alone; refusals print code, message and request id', async () => {
    // A user of its own, with no file yet.
    const config = path.join(dir, 'login', 'config.json')
    const as = runAs(() => ({ ...env, WARREN_CONFIG: config }))
    const bad = await as('login', '--url', base, '--token', 'svc_pat_wrong')
    assert.equal(bad.code, 1)
    assert.match(bad.stderr, /^warren: authentication_error: .+ \(request req_\w+\)\n$/)
    assert.equal(fs.existsSync(config), false, 'a refused token is not kept')

    const ok = await as('login', '--url', base, '--token', w.token)
    assert.equal(ok.code, 0, ok.stderr)
    assert.equal(fs.statSync(config).mode & 0o777, 0o600)
    assert.deepEqual(JSON.parse(fs.readFileSync(config, 'utf8')), { url: base, token: w.token })
    assert.equal(ok.stderr.includes(w.token), false, 'the token is never printed')

    const missing = await as('sessions', 'show', 'ses_nope')
    assert.equal(missing.code, 1)
    assert.match(missing.stderr, /^warren: not_found: .*ses_nope.* \(request req_\w+\)\n$/)
  })

  it('login to something that is not Warren (or nothing at all) says so and leaves the saved sign-in alone', async () => {
    const config = path.join(dir, 'login-elsewhere', 'config.json')
    fs.mkdirSync(path.dirname(config))
    const saved = JSON.stringify({ url: base, token: w.token })
    fs.writeFileSync(config, saved, { mode: 0o600 })
    const as = runAs(() => ({ ...env, WARREN_CONFIG: config }))
    // Some other web service on the address: a JSON answer of another shape, and an HTML page.
    const other = http.createServer((req, res) => {
      if (req.url!.startsWith('/json/')) res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}')
      else res.writeHead(200, { 'content-type': 'text/html' }).end('<html>Welcome</html>')
    })
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve))
    const otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`
    try {
      for (const url of [`${otherUrl}/json`, otherUrl]) {
        const r = await as('login', '--url', url, '--token', 'svc_pat_x')
        assert.equal(r.code, 1, r.stderr)
        assert.equal(r.stderr, `warren: not_warren: ${url} did not answer as a Warren service (GET /v1/health); check the address.\n`)
      }
    } finally {
      await new Promise((resolve) => other.close(resolve))
    }
    const down = await as('login', '--url', otherUrl, '--token', 'svc_pat_x')
    assert.equal(down.code, 1)
    assert.equal(down.stderr, `warren: service_unreachable: Could not reach the service at ${otherUrl} (ECONNREFUSED).\n`)
    assert.equal(fs.readFileSync(config, 'utf8'), saved, 'a failed login kept its address and token')
  })

  it('sessions create, list, show and delete; created through the CLI is recorded as such', async () => {
    const s = await json('sessions', 'create', '--title', 'from the cli', '--metadata', 'team=core')
    assert.equal(s.source, 'cli')
    assert.deepEqual(s.metadata, { team: 'core' })
    const list = await warren('sessions', 'list', '--metadata', 'team:core')
    assert.equal(list.code, 0, list.stderr)
    assert.match(list.stdout, new RegExp(`^ID +STATUS +CREATED +TITLE\\n${s.id} +\\w+ +[\\d-]+ [\\d:]+ +from the cli\\n$`))
    assert.equal((await json('sessions', 'show', s.id)).title, 'from the cli')
    assert.equal((await json('sessions', 'delete', s.id)).deleted, true)
    assert.equal((await warren('sessions', 'show', s.id)).code, 1)
  })

  it('sessions create --image names the workspace image; show prints it; a malformed reference is the service refusal', async () => {
    const ref = '127.0.0.1:5999/tools/go:1.22'
    const s = await json('sessions', 'create', '--image', ref)
    assert.deepEqual(s.environment.image, { ref, digest: null })
    const shown = await warren('sessions', 'show', s.id)
    assert.equal(shown.code, 0, shown.stderr)
    assert.match(shown.stdout, new RegExp(`^workspace \\w+  image ${ref.replace(/\./g, '\\.')} \\((digest not resolved yet|sha256:[0-9a-f]{64})\\)$`, 'm'))
    assert.equal((await json('sessions', 'delete', s.id)).deleted, true)
    const bad = await warren('sessions', 'create', '--image', 'Not/An:Image!')
    assert.equal(bad.code, 1)
    assert.match(bad.stderr, /^warren: invalid_request: environment\.image: image reference "Not\/An:Image!" /)
    const plain = await json('sessions', 'create')
    assert.equal(plain.environment.image, null, 'no --image: the host system')
    await json('sessions', 'delete', plain.id)
  })

  it('send, in a terminal: streams the turn, asks the approval and the question at the prompt, exits 0', async () => {
    const s = await json('sessions', 'create', '--approval-mode', 'ask')
    fake.script(
      { toolCalls: [{ id: 'call_sh', name: 'bash', args: { command: 'echo hello > hello.txt' } }] },
      { toolCalls: [{ id: 'call_q', name: 'ask_question', args: { question: 'Which colour?', options: ['red', 'blue'], allow_freeform: false } }] },
      { text: 'Painted it blue, all done.' },
    )
    const term = terminal(`${BIN} send ${s.id} 'paint it'`)
    await term.shows('Allow bash echo hello > hello.txt? [y/N]')
    term.keys('y', 'Enter')
    await term.shows('Which colour? [red / blue]')
    term.keys('blue', 'Enter')
    assert.equal(await term.exit(), 0, term.screen())
    const screen = term.screen()
    for (const line of ['→ bash echo hello > hello.txt', '  ✓ exit 0', '  + hello.txt', 'Painted it blue, all done.', /turn trn_\w+ completed/]) {
      assert.ok(typeof line === 'string' ? screen.includes(line) : line.test(screen), `the terminal shows ${line}:\n${screen}`)
    }
    const answered = fake.modelRequests.at(-1)!
    assert.ok(JSON.stringify(answered).includes('blue'), 'the answer typed at the prompt reached the model')
  })

  it('send, in a terminal: a prompt answered elsewhere goes away, and the turn ending ends the prompt and the command', async () => {
    const s = await json('sessions', 'create', '--approval-mode', 'ask')
    fake.script(
      { toolCalls: [{ id: 'call_else', name: 'bash', args: { command: 'echo elsewhere' } }] },
      { toolCalls: [{ id: 'call_ask', name: 'ask_question', args: { question: 'Which flavour?' } }] },
    )
    const term = terminal(`${BIN} send ${s.id} 'go on'`)
    await term.shows('Allow bash echo elsewhere? [y/N]')
    assert.equal((await warren('approve', s.id, 'call_else')).code, 0)
    await term.shows('(answered elsewhere)')
    await term.shows('Which flavour?')
    const [turn] = (await json('turns', 'list', s.id)).data
    assert.equal((await json('turns', 'cancel', s.id, turn.id)).status, 'cancelled')
    assert.equal(await term.exit(), 3, term.screen())
    const screen = term.screen()
    assert.ok(screen.includes('(the turn ended)'), screen)
    assert.match(screen, /turn trn_\w+ cancelled/)
  })

  it('send, from a script: JSON lines, a caller function answered from another command, and the settled turn', async () => {
    const s = await json('sessions', 'create')
    await json('files', 'put', s.id, fs.writeFileSync(path.join(dir, 'notes.txt'), 'uploaded by the cli\n') ?? path.join(dir, 'notes.txt'))
    const put = await w.inject({ method: 'PUT', url: `/v1/sessions/${s.id}/tools`, payload: { tools: [{ type: 'function', name: 'lookup', description: 'Look up.', parameters: { type: 'object', properties: {} } }] } })
    assert.equal(put.statusCode, 200, put.body)
    fake.script(
      { toolCalls: [{ id: 'call_cp', name: 'bash', args: { command: 'cp notes.txt copy.txt' } }] },
      { toolCalls: [{ id: 'call_fn', name: 'lookup', args: {} }] },
      { text: 'Looked it up.' },
    )
    const sending = warren('send', s.id, 'copy and look up', '--json')
    await waitFor('the function call waits', async () => (await json('sessions', 'show', s.id)).required_actions?.length > 0, 60_000)
    const answered = await warren('answer', s.id, 'call_fn', 'found it')
    assert.equal(answered.code, 0, answered.stderr)
    const sent = await sending
    assert.equal(sent.code, 0, sent.stderr)
    assert.match(sent.stderr, new RegExp(`waiting for the output of function lookup \\(call_fn\\): warren answer ${s.id} call_fn OUTPUT`))
    const lines = sent.stdout.trim().split('\n')
    const turn = JSON.parse(lines.slice(lines.findIndex((l) => l === '{')).join('\n'))
    assert.equal(turn.status, 'completed')
    const events = lines.slice(0, lines.findIndex((l) => l === '{')).map((l) => JSON.parse(l))
    assert.ok(events.some((e) => e.type === 'tool.required' && e.payload.name === 'lookup'))
    assert.ok(events.some((e) => e.type === 'file.changed' && e.payload.path === 'copy.txt'))

    const artifacts = await json('artifacts', 'list', s.id)
    const copy = artifacts.data.find((a: { path: string }) => a.path === 'copy.txt')
    assert.ok(copy, JSON.stringify(artifacts))
    const got = await warren('artifacts', 'get', s.id, copy.id, '-o', path.join(dir, 'got.txt'))
    assert.equal(got.code, 0, got.stderr)
    assert.equal(fs.readFileSync(path.join(dir, 'got.txt'), 'utf8'), 'uploaded by the cli\n')
    const tar = await warren('artifacts', 'archive', s.id, '-o', path.join(dir, 'all.tar'))
    assert.equal(tar.code, 0, tar.stderr)
    assert.ok(fs.readFileSync(path.join(dir, 'all.tar')).includes('uploaded by the cli'))
    assert.equal((await json('usage', s.id)).object, 'session.usage')

    // watch --from 0 replays what was persisted, then stays on until interrupted.
    const watcher = spawn(BIN, ['watch', s.id, '--from', '0', '--json'], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    let watched = ''
    watcher.stdout.on('data', (d: Buffer) => (watched += d.toString('utf8')))
    const exited = new Promise<number | null>((resolve) => watcher.once('exit', (code) => resolve(code)))
    await waitFor('watch replays the turn to its end', async () => watched.includes('"type":"turn.ended"'), 60_000)
    const replayed = watched.trim().split('\n').map((l) => JSON.parse(l) as { type: string; seq: number })
    assert.deepEqual(replayed.map((e) => e.seq), [...replayed.map((e) => e.seq)].sort((a, b) => a - b), 'in order')
    assert.ok(replayed.some((e) => e.type === 'tool.resolved'))
    watcher.kill('SIGINT')
    assert.equal(await exited, 0, 'an interrupted watch exits 0')
    assert.equal((await json('turns', 'list', s.id)).data[0].status, 'completed')
  })

  it('deny, turns cancel and the preview commands; a failed turn exits 2 and a cancelled one 3', async () => {
    const s = await json('sessions', 'create', '--approval-mode', 'ask')
    fake.script({ toolCalls: [{ id: 'call_rm', name: 'bash', args: { command: 'rm -rf /workspace/*' } }] }, { text: 'Understood, I will not.' })
    const sending = warren('send', s.id, 'clean up')
    await waitFor('the approval waits', async () => (await json('turns', 'list', s.id)).data.length > 0 && (await warren('deny', s.id, 'call_rm', '--reason', 'not today')).code === 0, 60_000)
    assert.equal((await sending).code, 0)

    fake.script({ toolCalls: [{ id: 'call_wait', name: 'bash', args: { command: 'true' } }] })
    const parked = warren('send', s.id, 'wait here')
    const turn = await waitFor('the second turn works', async () => (await json('turns', 'list', s.id)).data.find((t: { status: string }) => t.status === 'working'), 60_000)
    assert.equal((await json('turns', 'cancel', s.id, turn.id)).id, turn.id)
    const cancelled = await parked
    assert.equal(cancelled.code, 3, cancelled.stderr)
    assert.match(cancelled.stderr, /cancelled/)

    fake.script({ error: { status: 400, message: 'the model refuses this request', kind: 'invalid_request' as never } })
    const failed = await warren('send', s.id, 'fail please')
    assert.equal(failed.code, 2, failed.stderr)

    const opened = await json('preview', 'open', s.id, '--port', '3000')
    assert.equal(opened.port, 3000)
    assert.equal((await json('preview', 'close', s.id)).deleted, true)
  })
})
