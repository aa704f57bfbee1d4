// The web console (console/, served at /console): its files and headers, and the console itself
// driven in Debian's Chromium against the running service with a fake model. Screenshots of the
// main pages are written to a folder under the system's temporary directory, printed below.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core'
import { startWarren, type Warren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { ACTIONS_ENV } from './turn-actions-helpers.ts'
import { startSiteCommand } from './previews.helpers.ts'
import { CONSOLE_DIST, readConsoleFile } from '../src/console/read-console-file.ts'

const CHROMIUM = '/usr/bin/chromium'
const BUILT = fs.existsSync(path.join(CONSOLE_DIST, 'index.html'))

describe('the web console', () => {
  let w: Warren
  let fake: FakeModelServer
  let base: string

  before(async () => {
    assert.ok(BUILT, `the console is not built (${CONSOLE_DIST}): run bash scripts/setup.sh --deps-only`)
    w = await startWarren('sqlite', { env: { ...ACTIONS_ENV, WARREN_IDLE_PAUSE_MS: '600000' }, deliveries: false })
    base = await w.listen()
    fake = await startModelServer({ models: ['m1'] })
    const res = await w.inject({ method: 'POST', url: '/v1/model-credentials', payload: { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'], name: 'fake provider' } })
    assert.equal(res.statusCode, 201, res.body)
  })
  after(async () => {
    await w?.close()
    await fake?.close()
  })

  describe('its files', () => {
    it('serves index.html at /console and for every client route, without a token, never cached, under a strict CSP', async () => {
      for (const url of ['/console', '/console/', '/console/sessions/ses_123', '/console/webhooks']) {
        const res = await w.inject({ method: 'GET', url, token: null })
        assert.equal(res.statusCode, 200, `${url}: ${res.body}`)
        assert.match(String(res.headers['content-type']), /^text\/html/)
        assert.match(res.body, /<div id="app"><\/div>/)
        assert.equal(res.headers['cache-control'], 'no-cache')
        const csp = String(res.headers['content-security-policy'])
        for (const d of ["default-src 'self'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "object-src 'none'"]) assert.ok(csp.includes(d), `${url}: CSP lacks ${d}: ${csp}`)
        assert.ok(!csp.includes('unsafe-inline') && !csp.includes('unsafe-eval'), csp)
        assert.equal(res.headers['x-frame-options'], 'DENY')
        assert.equal(res.headers['x-content-type-options'], 'nosniff')
      }
      // The page loads nothing inline: every script and style is a file of its own.
      const index = (await w.inject({ method: 'GET', url: '/console', token: null })).body
      assert.doesNotMatch(index, /<script(?![^>]*\bsrc=)[^>]*>/)
      assert.doesNotMatch(index, /<style|style=/)
      assert.doesNotMatch(index, /https?:\/\//, 'nothing from another origin')
    })

    it('serves hashed assets cached for good, and answers a missing one with 404 in the error shape', async () => {
      const index = (await w.inject({ method: 'GET', url: '/console', token: null })).body
      const assets = [...index.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((m) => m[1]!)
      assert.ok(assets.some((a) => a.endsWith('.js')) && assets.some((a) => a.endsWith('.css')), index)
      for (const url of assets) {
        const res = await w.inject({ method: 'GET', url, token: null })
        assert.equal(res.statusCode, 200, url)
        assert.equal(res.headers['cache-control'], 'public, max-age=31536000, immutable')
        assert.match(String(res.headers['content-type']), url.endsWith('.js') ? /^text\/javascript/ : /^text\/css/)
      }
      for (const url of ['/console/assets/index-gone.js', '/console/assets/..%2f..%2fpackage.json', '/console/%2e%2e/package.json']) {
        const res = await w.inject({ method: 'GET', url, token: null })
        assert.equal(res.statusCode, 404, `${url}: ${res.body}`)
        assert.equal(res.json().error.code, 'not_found')
      }
    })

    it('is not an API operation: the OpenAPI description does not list it', async () => {
      const doc = (await w.inject({ method: 'GET', url: '/v1/openapi.json' })).json() as { paths: Record<string, unknown> }
      assert.ok(Object.keys(doc.paths).length > 10)
      assert.deepEqual(Object.keys(doc.paths).filter((p) => p.startsWith('/console')), [])
    })

    it('without a build, answers a page saying how to build it, not a 5xx', async () => {
      const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-console-none-'))
      try {
        const page = await readConsoleFile('sessions/ses_1', empty)
        assert.equal(page.status, 404)
        assert.match(String(page.body), /not built/)
        assert.match(String(page.body), /npm --prefix console run build/)
        assert.match(String(page.body), /scripts\/setup\.sh/)
      } finally {
        fs.rmSync(empty, { recursive: true, force: true })
      }
    })
  })

  describe('in a real browser', () => {
    if (!fs.existsSync(CHROMIUM)) {
      if (process.env.CI) throw new Error(`Chromium is required in CI but ${CHROMIUM} is missing: run scripts/setup.sh as root`)
      process.stdout.write(`# SKIPPED the console in a real browser: no ${CHROMIUM} (scripts/setup.sh installs it as root)\n`)
      return
    }
    let browser: Browser
    let context: BrowserContext
    let page: Page
    let shots: string
    let sessionId: string
    /** Every request the console's tab made, to check it called nothing but its own files and /v1. */
    const requested: string[] = []
    const pageErrors: string[] = []
    const shot = async (name: string) => page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: false })

    before(async () => {
      shots = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-console-screenshots-'))
      process.stdout.write(`# console screenshots: ${shots}\n`)
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        // As root Chromium needs --no-sandbox; the rest keeps it off the network it has no business on.
        args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--host-resolver-rules=MAP *.preview.localhost 127.0.0.1'],
      })
      context = await browser.newContext({ viewport: { width: 1360, height: 860 }, acceptDownloads: true, colorScheme: 'light' })
      page = await context.newPage()
      page.on('request', (r) => requested.push(r.url()))
      // What went wrong inside the page, for the test's output (a CSP refusal shows here too).
      page.on('pageerror', (err) => pageErrors.push(err.message))
      page.on('console', (m) => m.type() === 'error' && pageErrors.push(m.text()))
    })
    after(async () => {
      if (pageErrors.length) process.stdout.write(`# console page errors:\n${pageErrors.map((e) => `#   ${e}`).join('\n')}\n`)
      await browser?.close()
    })

    it('signs in with a token kept in the tab alone: not in the address, not in a cookie', async () => {
      await page.goto(`${base}/console`)
      await page.locator('input[name=token]').fill('svc_pat_wrong')
      await page.getByRole('button', { name: 'Sign in' }).click()
      await page.getByRole('alert').filter({ hasText: 'authentication_error' }).waitFor()
      await shot('sign-in')
      await page.locator('input[name=token]').fill(w.token)
      await page.getByRole('button', { name: 'Sign in' }).click()
      await page.getByRole('heading', { name: 'Sessions' }).waitFor()
      assert.equal(await page.evaluate(() => sessionStorage.getItem('warren.token')), w.token)
      assert.ok(!page.url().includes(w.token))
      assert.deepEqual(await context.cookies(), [])
      assert.equal(await page.evaluate(() => JSON.stringify(localStorage).includes('svc_pat_')), false)
    })

    it('creates a session, recorded as from the console with its labels and approval mode', async () => {
      await page.getByRole('button', { name: 'New session' }).click()
      await page.locator('input[name=title]').fill('Paint the fence')
      await page.locator('input[name=metadata]').fill('team=core')
      await page.getByRole('button', { name: 'Create session' }).click()
      await page.getByRole('heading', { name: 'Paint the fence' }).waitFor()
      sessionId = decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!)
      const s = (await w.inject({ method: 'GET', url: `/v1/sessions/${sessionId}` })).json()
      assert.equal(s.source, 'console')
      assert.deepEqual(s.metadata, { team: 'core' })
      assert.equal(s.agent.approval_mode, 'ask')
      assert.equal(s.environment.image, null)
      await page.locator('[data-testid=workspace-image]', { hasText: "the host's system" }).waitFor()
      await page.locator('.stream-live').waitFor()
    })

    it('sends a message and shows the answer streaming in, then settled in the same place', async () => {
      fake.script({ text: 'Hello from the fake model, word by word, as it streams in.', delayMs: 150 })
      await page.locator('textarea[name=message]').fill('Say hello')
      await page.getByRole('button', { name: 'Send' }).click()
      await page.locator('.entry.user', { hasText: 'Say hello' }).waitFor()
      // While words arrive the entry streams; the settled message then fills that same entry.
      const streaming = page.locator('.entry.agent.streaming')
      await streaming.waitFor({ timeout: 30_000 })
      const partial = (await streaming.textContent()) ?? ''
      assert.ok(partial.length < 'Hello from the fake model, word by word, as it streams in.'.length, `saw the text streaming: "${partial}"`)
      await page.locator('.entry.agent:not(.streaming)', { hasText: 'Hello from the fake model, word by word, as it streams in.' }).waitFor({ timeout: 30_000 })
      assert.equal(await page.locator('[data-testid=agent-text]').count(), 1, 'one entry for the streamed and the settled text')
    })

    it('approves a tool call and answers a question in place; the file change shows with its diff', async () => {
      fake.script(
        { toolCalls: [{ id: 'call_sh', name: 'bash', args: { command: 'echo hello > hello.txt' } }] },
        { toolCalls: [{ id: 'call_q', name: 'ask_question', args: { question: 'Which colour?', options: ['red', 'blue'], allow_freeform: false } }] },
        { text: 'Painted it blue, all done.' },
      )
      await page.locator('textarea[name=message]').fill('Paint it')
      await page.locator('textarea[name=message]').press('Control+Enter')
      const approval = page.locator('[data-testid=approval]', { hasText: 'echo hello > hello.txt' })
      await approval.getByRole('button', { name: 'Approve' }).waitFor({ timeout: 60_000 })
      await page.locator('.panel.attention').waitFor()
      await shot('session-approval')
      await approval.getByRole('button', { name: 'Approve' }).click()
      await approval.locator('.ask-result', { hasText: 'Approved' }).waitFor({ timeout: 60_000 })
      const question = page.locator('[data-testid=question]', { hasText: 'Which colour?' })
      await question.getByRole('button', { name: 'blue' }).click({ timeout: 60_000 })
      await question.locator('.ask-result', { hasText: 'Answered: blue' }).waitFor({ timeout: 60_000 })
      await page.locator('.entry.agent', { hasText: 'Painted it blue, all done.' }).waitFor({ timeout: 60_000 })
      assert.ok(JSON.stringify(fake.modelRequests.at(-1)).includes('blue'), 'the answer reached the model')
      await page.locator('.entry.file', { hasText: 'hello.txt' }).locator('.diff .add', { hasText: '+hello' }).waitFor()
      await page.locator('.entry.tool', { hasText: 'bash' }).locator('.tool-state', { hasText: '✓' }).waitFor()
      await waitFor('the session is idle', async () => (await w.inject({ method: 'GET', url: `/v1/sessions/${sessionId}` })).json().status === 'idle', 60_000)
      await page.locator('.page-header .status-idle').waitFor({ timeout: 30_000 })
      await page.locator('.panel', { hasText: 'Artifacts' }).locator('li', { hasText: 'hello.txt' }).waitFor({ timeout: 60_000 })
      await shot('session')
    })

    it('downloads an artifact and the archive', async () => {
      const row = page.locator('.panel', { hasText: 'Artifacts' }).locator('li', { hasText: 'hello.txt' })
      await row.waitFor({ timeout: 60_000 })
      const [download] = await Promise.all([page.waitForEvent('download'), row.getByRole('button', { name: 'Download' }).click()])
      assert.equal(download.suggestedFilename(), 'hello.txt')
      assert.equal(fs.readFileSync((await download.path())!, 'utf8'), 'hello\n')
      const [archive] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download all (tar)' }).click()])
      assert.equal(archive.suggestedFilename(), `${sessionId}.tar`)
      assert.ok(fs.readFileSync((await archive.path())!).includes('hello\n'))
    })

    it('publishes the preview and opens it in a new tab', async () => {
      // The agent starts a small site in its workspace (approved like any command in ask mode).
      fake.script({ toolCalls: [{ id: 'call_site', name: 'bash', args: { command: startSiteCommand(3000, '127.0.0.1', 'workspace-site') } }] }, { text: 'The site is up on port 3000.' })
      await page.locator('textarea[name=message]').fill('Start the site')
      await page.getByRole('button', { name: 'Send' }).click()
      await page.locator('[data-testid=approval]', { hasText: 'site.cjs' }).getByRole('button', { name: 'Approve' }).click({ timeout: 60_000 })
      await page.locator('.entry.agent', { hasText: 'The site is up on port 3000.' }).waitFor({ timeout: 60_000 })
      const panel = page.locator('.panel', { hasText: 'Preview' })
      await panel.locator('input[name=port]').fill('3000')
      await panel.getByRole('button', { name: 'Publish' }).click()
      const link = panel.getByRole('link', { name: /Open preview/ })
      await link.waitFor({ timeout: 30_000 })
      const published = (await w.inject({ method: 'GET', url: `/v1/sessions/${sessionId}` })).json().preview.published_url as string
      assert.equal(await link.getAttribute('href'), published)
      const [tab] = await Promise.all([context.waitForEvent('page'), link.click()])
      await tab.waitForLoadState()
      assert.equal(tab.url(), published)
      assert.equal(await tab.title(), 'workspace-site')
      assert.equal(await tab.evaluate(() => window.opener), null, 'the preview cannot reach back into the console')
      await tab.close()
    })

    it('cancels a queued turn from the turn queue', async () => {
      fake.script({ hang: true, text: 'Thinking hard' })
      await page.locator('textarea[name=message]').fill('First, a long one')
      await page.getByRole('button', { name: 'Send' }).click()
      await page.locator('[data-testid=open-turn]', { hasText: 'running' }).waitFor({ timeout: 30_000 })
      await page.locator('textarea[name=message]').fill('Then this one')
      await page.getByRole('button', { name: 'Send' }).click()
      const queued = page.locator('[data-testid=open-turn]', { hasText: 'queued' })
      await queued.waitFor({ timeout: 30_000 })
      await queued.getByRole('button', { name: 'Cancel' }).click()
      await queued.waitFor({ state: 'detached', timeout: 30_000 })
      const running = page.locator('[data-testid=open-turn]', { hasText: 'running' })
      await running.getByRole('button', { name: 'Cancel' }).click()
      await page.locator('[data-testid=open-turn]').first().waitFor({ state: 'detached', timeout: 30_000 })
      const turns = (await w.inject({ method: 'GET', url: `/v1/sessions/${sessionId}/turns` })).json().data as { status: string }[]
      assert.deepEqual(turns.slice(0, 2).map((t) => t.status), ['cancelled', 'cancelled'])
    })

    it("shows a caller function's arguments and sends its output", async () => {
      const put = await w.inject({ method: 'PUT', url: `/v1/sessions/${sessionId}/tools`, payload: { tools: [{ type: 'function', name: 'lookup', description: 'Look up.', parameters: { type: 'object', properties: { key: { type: 'string' } } } }] } })
      assert.equal(put.statusCode, 200, put.body)
      fake.script({ toolCalls: [{ id: 'call_fn', name: 'lookup', args: { key: 'fence-colour' } }] }, { text: 'Looked it up.' })
      await page.locator('textarea[name=message]').fill('Look it up')
      await page.getByRole('button', { name: 'Send' }).click()
      const fn = page.locator('[data-testid=required-action]', { hasText: 'lookup' })
      await fn.locator('pre', { hasText: 'fence-colour' }).waitFor({ timeout: 60_000 })
      await fn.locator('textarea[name=output]').fill('{"colour": "blue"}')
      await fn.getByRole('button', { name: 'Send output' }).click()
      await fn.locator('.ask-result', { hasText: 'Output given' }).waitFor({ timeout: 60_000 })
      await page.locator('.entry.agent', { hasText: 'Looked it up.' }).waitFor({ timeout: 60_000 })
      assert.ok(JSON.stringify(fake.modelRequests.at(-1)).includes('colour'), 'the output reached the model')
    })

    it('shows a refused answer, and closes an approval whose turn was cancelled: no live buttons, nothing waiting or running', async () => {
      fake.script(
        { toolCalls: [{ id: 'call_late', name: 'bash', args: { command: 'echo answered-elsewhere' } }] },
        { toolCalls: [{ id: 'call_stuck', name: 'bash', args: { command: 'echo never-run' } }] },
      )
      await page.locator('textarea[name=message]').fill('Two commands')
      await page.getByRole('button', { name: 'Send' }).click()
      const late = page.locator('[data-testid=approval]', { hasText: 'answered-elsewhere' })
      await late.getByRole('button', { name: 'Approve' }).waitFor({ timeout: 60_000 })
      // The page hears nothing for a while (its stream cut and held off); the approval is answered
      // elsewhere meanwhile, so the page's own Approve meets a refusal, which it shows.
      const eventStream = (url: URL) => url.pathname.endsWith('/events')
      await page.route(eventStream, (r) => r.abort())
      try {
        w.app.server.closeAllConnections()
        await page.locator('.stream-reconnecting').waitFor({ timeout: 30_000 })
        const elsewhere = await w.inject({ method: 'POST', url: `/v1/sessions/${sessionId}/approvals/call_late`, payload: { approved: true } })
        assert.equal(elsewhere.statusCode, 200, elsewhere.body)
        await late.getByRole('button', { name: 'Approve' }).click()
        await late.getByRole('alert').filter({ hasText: 'conflict' }).waitFor({ timeout: 30_000 })
      } finally {
        await page.unroute(eventStream)
      }
      await late.locator('.ask-result', { hasText: 'Approved' }).waitFor({ timeout: 60_000 })

      const stuck = page.locator('[data-testid=approval]', { hasText: 'never-run' })
      await stuck.getByRole('button', { name: 'Approve' }).waitFor({ timeout: 60_000 })
      const [turn] = (await w.inject({ method: 'GET', url: `/v1/sessions/${sessionId}/turns?limit=1` })).json().data
      await page.locator('[data-testid=open-turn]', { hasText: 'running' }).getByRole('button', { name: 'Cancel' }).click()
      await stuck.locator('.ask-result', { hasText: 'Refused (turn ended)' }).waitFor({ timeout: 60_000 })
      assert.equal(await stuck.getByRole('button', { name: 'Approve' }).count(), 0, 'no live buttons on a closed request')
      await page.locator('.entry.tool', { hasText: 'never-run' }).locator('.tool-state', { hasText: 'cancelled' }).waitFor({ timeout: 30_000 })
      assert.equal(await page.locator('.panel.attention').count(), 0, 'nothing waits on a person')
      assert.equal((await w.inject({ method: 'GET', url: `/v1/sessions/${sessionId}/turns/${turn.id}` })).json().status, 'cancelled')
    })

    it('reconnects its stream by itself after a cut and misses nothing said meanwhile', async () => {
      await page.locator('.stream-live').waitFor()
      // Every connection to the service is cut; the message goes in while the page has none.
      w.app.server.closeAllConnections()
      await page.locator('.stream-reconnecting').waitFor({ timeout: 30_000 })
      fake.script({ text: 'Written while you were away.' })
      const sent = await w.inject({ method: 'POST', url: `/v1/sessions/${sessionId}/messages`, payload: { text: 'Are you there?' } })
      assert.equal(sent.statusCode, 202, sent.body)
      await page.locator('.entry.user', { hasText: 'Are you there?' }).waitFor({ timeout: 60_000 })
      await page.locator('.entry.agent', { hasText: 'Written while you were away.' }).waitFor({ timeout: 60_000 })
      await page.locator('.stream-live').waitFor()
      assert.equal(await page.locator('.entry.user', { hasText: 'Are you there?' }).count(), 1, 'nothing shown twice')
    })

    it('shows the sessions list with filters, and the management pages', async () => {
      await page.getByRole('link', { name: 'Sessions' }).click()
      await page.getByRole('link', { name: 'Paint the fence' }).waitFor()
      await page.locator('input[name=metadata-filter]').fill('team:nobody')
      await page.locator('input[name=metadata-filter]').press('Enter')
      await page.getByText('No sessions match.').waitFor()
      await page.locator('input[name=metadata-filter]').fill('team:core')
      await page.locator('input[name=metadata-filter]').press('Enter')
      await page.getByRole('link', { name: 'Paint the fence' }).waitFor()
      // Made in the console: the source filter finds it under console and not under cli.
      await page.locator('select[name=source]').selectOption('cli')
      await page.getByText('No sessions match.').waitFor()
      await page.locator('select[name=source]').selectOption('console')
      await page.getByRole('link', { name: 'Paint the fence' }).waitFor()
      await page.locator('select[name=source]').selectOption('')
      await shot('sessions')

      await page.getByRole('link', { name: 'Model connections' }).click()
      await page.getByRole('cell', { name: /fake provider/ }).waitFor()
      await shot('model-connections')

      const hook = await w.inject({ method: 'POST', url: '/v1/webhooks', payload: { url: 'https://hooks.example.com/warren', events: ['turn.completed'] } })
      assert.equal(hook.statusCode, 201, hook.body)
      await page.getByRole('link', { name: 'Webhooks' }).click()
      await page.getByRole('cell', { name: 'https://hooks.example.com/warren' }).waitFor()
      assert.match((await page.locator('[data-testid=pending]').first().textContent()) ?? '', /^\d+$/)
      await shot('webhooks')

      await page.getByRole('link', { name: 'Agents' }).click()
      await page.getByRole('heading', { name: 'Agents' }).waitFor()
      await page.locator('input[name=agent-name]').fill('reviewer')
      await page.locator('input[name=agent-model]').fill('m1')
      await page.locator('textarea[name=agent-instructions]').fill('Review, do not write.')
      await page.getByRole('button', { name: 'Create agent' }).click()
      await page.getByRole('cell', { name: 'Review, do not write.' }).waitFor()
      const agents = await w.inject({ method: 'GET', url: '/v1/agents' })
      assert.ok(agents.json().data.some((a: { name: string; model: string }) => a.name === 'reviewer' && a.model === 'm1'), agents.body)
      await shot('agents')
      // Removing asks first; a refused question removes nothing, an accepted one removes the row.
      const row = page.getByRole('row', { name: /reviewer/ })
      page.once('dialog', (d) => void d.dismiss())
      await row.getByRole('button', { name: 'Delete' }).click()
      assert.equal((await w.inject({ method: 'GET', url: '/v1/agents' })).json().data.length, 1, 'a dismissed question deletes nothing')
      page.once('dialog', (d) => void d.accept())
      await row.getByRole('button', { name: 'Delete' }).click()
      await row.waitFor({ state: 'detached' })
      assert.equal((await w.inject({ method: 'GET', url: '/v1/agents' })).json().data.length, 0)

      await page.getByRole('link', { name: 'Environments' }).click()
      await page.getByRole('heading', { name: 'Profiles' }).waitFor()
      await page.locator('input[name=profile-name]').fill('staging')
      await page.locator('textarea[name=profile-env]').fill('API_URL=https://staging.example.com\nAPI_KEY=hush-hush')
      await page.getByRole('button', { name: 'Create profile' }).click()
      await page.getByRole('cell', { name: 'staging' }).waitFor()
      assert.equal(await page.getByText('hush-hush').count(), 0, 'a profile value is never shown back')
      await page.locator('input[name=template-name]').fill('web')
      await page.locator('input[name=template-profiles]').fill('staging')
      await page.locator('textarea[name=template-setup]').fill('npm ci')
      await page.locator('input[name=template-image]').fill('127.0.0.1:5999/web/node:22')
      await page.getByRole('button', { name: 'Save template' }).click()
      await page.getByRole('cell', { name: /^web/ }).waitFor()
      await page.getByRole('cell', { name: '127.0.0.1:5999/web/node:22' }).waitFor()
      const templates = await w.inject({ method: 'GET', url: '/v1/environment-templates' })
      const web = templates.json().data.find((t: { name: string }) => t.name === 'web')
      assert.equal(web?.setup, 'npm ci', templates.body)
      assert.equal(web?.profiles.length, 1)
      assert.equal(web?.image, '127.0.0.1:5999/web/node:22')
      await shot('environments')

      // Dark mode: the toggle overrides the system's scheme.
      await page.getByRole('link', { name: 'Sessions' }).click()
      await page.getByRole('link', { name: 'Paint the fence' }).click()
      await page.locator('.entry.agent', { hasText: 'Painted it blue' }).waitFor()
      await page.getByRole('button', { name: /Theme/ }).click()
      await page.waitForFunction(() => document.documentElement.dataset.theme === 'dark')
      const bg = await page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor)
      assert.equal(bg, 'rgb(21, 23, 27)')
      await shot('session-dark')
    })

    it('creates a session on an image from the form, and its page shows the image and its digest', async () => {
      const ref = '127.0.0.1:5999/tools/go:1.22'
      await page.getByRole('link', { name: 'Sessions' }).click()
      await page.getByRole('button', { name: 'New session' }).click()
      await page.locator('input[name=title]').fill('On an image')
      await page.locator('input[name=image]').fill(ref)
      await page.getByRole('button', { name: 'Create session' }).click()
      await page.getByRole('heading', { name: 'On an image' }).waitFor()
      const id = decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!)
      const s = (await w.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json()
      assert.equal(s.environment.image.ref, ref, JSON.stringify(s.environment))
      await page.locator('[data-testid=workspace-image]', { hasText: ref }).waitFor()
      // No registry answers at that address: whatever the provider, no digest is ever resolved.
      await page.getByText('not resolved yet').waitFor()
      await shot('session-image')
      // A malformed reference is refused in the form, with the service's reason.
      await page.getByRole('link', { name: 'Sessions' }).click()
      await page.getByRole('button', { name: 'New session' }).click()
      await page.locator('input[name=image]').fill('Not An Image')
      await page.getByRole('button', { name: 'Create session' }).click()
      await page.getByRole('alert').filter({ hasText: 'environment.image' }).waitFor()
      await page.getByRole('button', { name: 'Close' }).click()
      assert.equal((await w.inject({ method: 'DELETE', url: `/v1/sessions/${id}` })).statusCode, 200)
      // Back where the tests after this one start: the first session's page.
      await page.getByRole('link', { name: 'Paint the fence' }).click()
      await page.getByRole('heading', { name: 'Paint the fence' }).waitFor()
    })

    it('goes back to sign-in when the service refuses the kept token (revoked)', async () => {
      const mint = await w.inject({ method: 'POST', url: '/v1/tokens', payload: { scopes: ['sessions:read', 'sessions:write', 'webhooks:read', 'usage:read'], expires_in_days: 7 } })
      assert.equal(mint.statusCode, 201, mint.body)
      const minted = mint.json() as { id: string; token: string }
      await page.evaluate((t) => sessionStorage.setItem('warren.token', t), minted.token)
      await page.reload()
      await page.getByRole('heading', { name: 'Paint the fence' }).waitFor()
      const revoked = await w.inject({ method: 'DELETE', url: `/v1/tokens/${minted.id}` })
      assert.equal(revoked.statusCode, 200, revoked.body)
      // Any request now meets the refusal: the page's own stream may meet it first and sign out
      // before a click lands (the link then is gone), so the click is made only if the link is there.
      await page.evaluate(() => document.querySelector<HTMLAnchorElement>('nav a[href$="/webhooks"]')?.click())
      await page.getByRole('alert').filter({ hasText: 'refused the token' }).waitFor({ timeout: 30_000 })
      assert.equal(await page.evaluate(() => sessionStorage.getItem('warren.token')), null, 'the refused token is forgotten')
    })

    it('called nothing but its own files and the public /v1 API', () => {
      const outside = requested.filter((u) => {
        const url = new URL(u)
        if (url.protocol === 'data:' || url.protocol === 'blob:') return false
        return url.origin !== base || !(url.pathname === '/console' || url.pathname.startsWith('/console/') || url.pathname.startsWith('/v1/'))
      })
      assert.ok(requested.some((u) => u.includes('/v1/sessions')), 'the console used the API')
      assert.deepEqual(outside, [])
    })
  })
})
