// A real browser on a published preview: headless Chromium (Debian's, driven by playwright-core)
// loads the page a workspace serves, runs its script, and talks WebSocket through the proxy.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { chromium, type Browser } from 'playwright-core'
import { useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, newOrg } from './turns.helpers.ts'
import { agentRuns, startSiteCommand } from './previews.helpers.ts'

const CHROMIUM = '/usr/bin/chromium'

describe('previews in a real browser [sqlite]', () => {
  if (!fs.existsSync(CHROMIUM)) {
    if (process.env.CI) throw new Error(`Chromium is required in CI but ${CHROMIUM} is missing: run scripts/setup.sh as root`)
    process.stdout.write(`# SKIPPED previews in a real browser: no ${CHROMIUM} (scripts/setup.sh installs it as root)\n`)
    return
  }
  const w = useWarren('sqlite', { env: { ...NO_RATE_LIMITS, WARREN_IDLE_PAUSE_MS: '600000' } })
  let fake: FakeModelServer
  let browser: Browser
  let published: string

  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    await w().listen()
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    assert.equal((await agentRuns(c, fake, sid, startSiteCommand(3000, '127.0.0.1', 'workspace-site'))).status, 'completed')
    const res = await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain: 'browser-check' })
    assert.equal(res.statusCode, 200, res.body)
    published = res.json().published_url
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      // As root Chromium needs --no-sandbox; the rest keeps it off the network it has no business on.
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--host-resolver-rules=MAP *.preview.localhost 127.0.0.1'],
    })
  })
  after(async () => {
    await browser?.close()
    await fake?.close()
  })

  it('loads the published page, runs its script, and its WebSocket echoes through the proxy', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    const answer = await page.goto(published)
    assert.equal(answer?.status(), 200)
    assert.equal(await page.title(), 'workspace-site')
    assert.equal(await page.locator('#title').textContent(), 'Hello from workspace-site')
    // The page's own script opened a WebSocket to its origin, sent a line and showed the echo.
    await page.locator('#ws', { hasText: 'echo: ping from the page' }).waitFor({ timeout: 15_000 })
    // The cookie that asked for the whole preview domain was kept to this preview's host.
    const cookies = await context.cookies()
    const seen = cookies.find((c) => c.name === 'seen')
    assert.equal(seen?.domain, new URL(published).hostname)
    await context.close()
  })

  it('keeps every cookie the site sets on its host, however it spells Domain, the WebSocket handshake\'s too', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    await page.goto(`${published}cookies`)
    await page.goto(published)
    await page.locator('#ws', { hasText: 'echo: ping from the page' }).waitFor({ timeout: 15_000 })
    // A handshake answer with bytes before its status line is refused, not passed on unfiltered.
    const slopOpened = await page.evaluate(
      () =>
        new Promise<boolean>((resolve) => {
          const ws = new WebSocket(`${location.origin.replace(/^http/, 'ws')}/ws-slop`)
          ws.onopen = () => resolve(true)
          ws.onerror = () => resolve(false)
        }),
    )
    assert.equal(slopOpened, false)
    const host = new URL(published).hostname
    const cookies = await context.cookies()
    assert.deepEqual(cookies.map((c) => c.name).sort(), ['a', 'b', 'c', 'd', 'e', 'plain', 'seen', 'ws', 'wscr', 'wsfold'])
    for (const c of cookies) assert.equal(c.domain, host, c.name)
    await context.close()
  })

  it('shows the service page, not a browser error, for a name nothing is published under', async () => {
    const page = await browser.newPage()
    const answer = await page.goto(published.replace('browser-check', 'nobody-here'))
    assert.equal(answer?.status(), 404)
    assert.match((await page.locator('body').textContent()) ?? '', /No preview is published at this address/)
    await page.close()
  })
})
