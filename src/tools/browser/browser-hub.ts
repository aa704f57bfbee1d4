import fs from 'node:fs'
import { chromium, type Browser, type Page } from 'playwright-core'
import type { Sandbox, SandboxProcess } from '../../sandbox/sandbox.ts'

/** Debian's Chromium binary (its /usr/bin/chromium is a wrapper script that reads /etc). */
export const CHROMIUM = '/usr/lib/chromium/chromium'
const START_TIMEOUT_MS = 20_000

// Looked for once: the tools offered are decided at every model step, the binary does not come and go.
let chromiumFound: boolean | undefined
export const chromiumAvailable = (): boolean => (chromiumFound ??= fs.existsSync(CHROMIUM))

type SessionBrowser = { proc: SandboxProcess; browser: Browser; page: Page }

/**
 * One headless Chromium per session, started on first use inside the session's sandbox: as its
 * user, in its network namespace, going out through its egress proxy (loopback included, which
 * the proxy refuses), so a page the agent opens can reach nothing the workspace cannot. The
 * service drives it over the DevTools protocol, reached like a preview (the sandbox's address,
 * redirected to its loopback). It closes when the workspace pauses, and is gone with the session.
 */
export type BrowserHub = {
  /** The session's page, the browser started first when it is not running. */
  page(sessionId: string, sandbox: () => Promise<Sandbox>): Promise<Page>
  close(sessionId: string): Promise<void>
  closeAll(): Promise<void>
  /** The workspace port the session's browser listens on for DevTools (never to be published), or null. */
  port(sessionId: string): number | null
}

export function browserHub(): BrowserHub {
  const sessions = new Map<string, Promise<SessionBrowser>>()
  const ports = new Map<string, number>()

  async function start(sessionId: string, sandbox: Sandbox, current: () => boolean): Promise<SessionBrowser> {
    // A port of its own each start: a server the agent runs may hold any fixed one.
    const port = 40_000 + Math.floor(Math.random() * 20_000)
    ports.set(sessionId, port)
    // Whatever ends this browser (a crash, the workspace reclaimed) forgets it, unless a newer one took its place.
    const forget = () => {
      if (!current()) return
      sessions.delete(sessionId)
      ports.delete(sessionId)
    }
    const flags = [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-quic', '--mute-audio',
      '--remote-debugging-address=127.0.0.1', `--remote-debugging-port=${port}`, '--user-data-dir=/tmp/warren-browser',
      // Every request goes to the egress proxy, loopback too (Chromium bypasses it for loopback unless told).
      '--proxy-server="$HTTP_PROXY"', '--proxy-bypass-list="<-loopback>"',
    ]
    // Without a proxy (no allowlist) the sandbox has no network at all, and neither has the browser.
    const command = `if [ -z "$HTTP_PROXY" ]; then HTTP_PROXY=http://0.0.0.0:9; fi; exec ${CHROMIUM} ${flags.join(' ')} about:blank`
    const home = '/tmp/warren-browser-home'
    const proc = await sandbox.spawn({ command, env: { HOME: home, XDG_CONFIG_HOME: `${home}/.config`, XDG_CACHE_HOME: `${home}/.cache` } })
    let said = ''
    proc.stdout.on('data', () => {})
    const listening = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`Chromium did not start within ${START_TIMEOUT_MS / 1000} s`)), START_TIMEOUT_MS)
      proc.stderr.on('data', (d: Buffer) => {
        said = (said + d.toString('utf8')).slice(-4000)
        if (said.includes('DevTools listening')) clearTimeout(timer), resolve()
      })
      void proc.exited.then((code) => (clearTimeout(timer), reject(new Error(`Chromium exited (${code ?? 'signal'}): ${said.split('\n').filter((l) => !/dbus/.test(l)).slice(-5).join(' ').trim()}`))))
    })
    try {
      await listening
      const address = await sandbox.resolvePreview(port)
      const browser = await chromium.connectOverCDP(`http://${address.host}:${address.port}`, { timeout: START_TIMEOUT_MS })
      const context = browser.contexts()[0] ?? (await browser.newContext())
      const page = context.pages()[0] ?? (await context.newPage())
      // Whatever ends it (the workspace reclaimed, a crash), the next use starts another.
      browser.on('disconnected', forget)
      void proc.exited.then(forget)
      return { proc, browser, page }
    } catch (err) {
      await proc.kill().catch(() => {})
      throw err
    }
  }

  async function close(sessionId: string): Promise<void> {
    const pending = sessions.get(sessionId)
    sessions.delete(sessionId)
    ports.delete(sessionId)
    const b = await pending?.catch(() => null)
    if (!b) return
    await b.browser.close().catch(() => {})
    await b.proc.kill().catch(() => {})
  }

  return {
    async page(sessionId, sandbox) {
      let pending = sessions.get(sessionId)
      if (!pending) {
        const mine: Promise<SessionBrowser> = sandbox().then((s) => start(sessionId, s, () => sessions.get(sessionId) === mine))
        pending = mine
        sessions.set(sessionId, mine)
        mine.catch(() => {
          if (sessions.get(sessionId) === mine) sessions.delete(sessionId), ports.delete(sessionId)
        })
      }
      const b = await pending
      if (b.page.isClosed()) b.page = await (b.browser.contexts()[0] ?? (await b.browser.newContext())).newPage()
      return b.page
    },
    close,
    port: (sessionId) => ports.get(sessionId) ?? null,
    async closeAll() {
      await Promise.all([...sessions.keys()].map(close))
    },
  }
}
