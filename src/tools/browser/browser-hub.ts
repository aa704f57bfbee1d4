import fs from 'node:fs'
import type { Browser, Page } from 'playwright-core'
import type { Sandbox, SandboxProcess } from '../../sandbox/sandbox.ts'
import type { Log } from '../../shared/log.ts'
import { cdpPipe } from './cdp-pipe.ts'

/** Debian's Chromium binary (its /usr/bin/chromium is a wrapper script that reads /etc). */
export const CHROMIUM = '/usr/lib/chromium/chromium'
const START_TIMEOUT_MS = 20_000

// Looked for once: the tools offered are decided at every model step, the binary does not come and go.
let chromiumFound: boolean | undefined
export const chromiumAvailable = (): boolean => (chromiumFound ??= fs.existsSync(CHROMIUM))

/** What the browser runs: Chromium, and the crash handler it starts, headless too, whatever its flags. */
export const BROWSER_BINARIES = [CHROMIUM, '/usr/lib/chromium/chrome_crashpad_handler']

/**
 * Those of `binaries` that every user may read, a workspace's too. The kernel leaves a process
 * run from a binary its user may read dumpable, so a workspace process (same user, same pid
 * namespace) may ptrace the browser or write its memory, and so write what it says to the
 * service. scripts/setup.sh makes them executable only (0711), which the start-up report checks.
 */
export function readableBrowserBinaries(binaries: readonly string[] = BROWSER_BINARIES): string[] {
  return binaries.filter((p) => {
    try {
      return (fs.statSync(p).mode & 0o004) !== 0
    } catch {
      return false // absent: nothing to run, nothing to take over
    }
  })
}

type SessionBrowser = { proc: SandboxProcess; browser: Browser; page: Page }

/**
 * What the model is told when the browser cannot be started or reached: nothing of why, which
 * comes from the workspace (the browser's output, what answers on its channel). The log has it.
 */
export const BROWSER_UNAVAILABLE = 'the browser could not be started in the workspace'

/**
 * One headless Chromium per session, started on first use inside the session's sandbox: as its
 * user, in its network namespace, going out through its egress proxy (loopback included, which
 * the proxy refuses), so a page the agent opens can reach nothing the workspace cannot. The
 * service drives it over the DevTools protocol on a pair of pipes it hands the browser at its
 * start (--remote-debugging-pipe), never over a port: a port is found, taken first and answered
 * by any process of the workspace, which would then say where the service connects. It closes
 * when the workspace pauses, and is gone with the session.
 */
export type BrowserHub = {
  /** The session's page, the browser started first when it is not running. Rejects with BROWSER_UNAVAILABLE. */
  page(sessionId: string, sandbox: () => Promise<Sandbox>): Promise<Page>
  close(sessionId: string): Promise<void>
  closeAll(): Promise<void>
}

export function browserHub(deps: { log: Log }): BrowserHub {
  const sessions = new Map<string, Promise<SessionBrowser>>()

  async function start(sessionId: string, sandbox: Sandbox, current: () => boolean): Promise<SessionBrowser> {
    // Whatever ends this browser (a crash, the workspace reclaimed) forgets it, unless a newer one took its place.
    const forget = () => {
      if (current()) sessions.delete(sessionId)
    }
    const flags = [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-quic', '--mute-audio',
      '--remote-debugging-pipe', '--user-data-dir=/tmp/warren-browser',
      // Every request goes to the egress proxy, loopback too (Chromium bypasses it for loopback unless told).
      '--proxy-server="$HTTP_PROXY"', '--proxy-bypass-list="<-loopback>"',
    ]
    // Without a proxy (no allowlist) the sandbox has no network at all, and neither has the browser.
    const command = `if [ -z "$HTTP_PROXY" ]; then HTTP_PROXY=http://0.0.0.0:9; fi; exec ${CHROMIUM} ${flags.join(' ')} about:blank`
    const home = '/tmp/warren-browser-home'
    const env = { HOME: home, XDG_CONFIG_HOME: `${home}/.config`, XDG_CACHE_HOME: `${home}/.cache` }
    let proc: SandboxProcess
    try {
      // fd 3 carries the service's commands to the browser, fd 4 its answers.
      proc = await sandbox.spawn({ command, env, extraFds: 2 })
    } catch (err) {
      deps.log.warn({ err, component: 'browser', session_id: sessionId }, 'the session browser could not be spawned')
      throw new Error(BROWSER_UNAVAILABLE)
    }
    // Its output is the workspace's to write: kept for the log only.
    let said = ''
    proc.stdout.on('data', () => {})
    proc.stderr.on('data', (d: Buffer) => {
      said = (said + d.toString('utf8')).slice(-2000)
    })
    const transport = cdpPipe(proc.fds[0]!, proc.fds[1]!, (err) => {
      deps.log.warn({ err, component: 'browser', session_id: sessionId }, 'the session browser\'s DevTools pipe broke')
    })
    // The pipe's end may outlive the browser in a process it started: its exit ends the connection.
    void proc.exited.then(() => transport.close())
    try {
      // Loaded at the first browser, not at start: playwright was the largest part (about a sixth)
      // of the CPU every process of the service spent loading its modules.
      const { chromium } = await import('playwright-core')
      const browser = await chromium.connectOverCDP(transport, { timeout: START_TIMEOUT_MS })
      const context = browser.contexts()[0] ?? (await browser.newContext())
      const page = context.pages()[0] ?? (await context.newPage())
      // Whatever ends it (the workspace reclaimed, a crash), the next use starts another. A pipe
      // broken under a browser still running (see cdpPipe) leaves nothing running behind it.
      browser.on('disconnected', () => {
        forget()
        void proc.kill().catch(() => {}) // most often it is gone already, which is why it disconnected
      })
      void proc.exited.then(forget)
      return { proc, browser, page }
    } catch (err) {
      transport.close()
      await proc.kill().catch(() => {}) // the start's failure is logged just below
      deps.log.warn({ err, component: 'browser', session_id: sessionId, stderr: said.split('\n').slice(-5).join('\n') }, 'the session browser did not start')
      throw new Error(BROWSER_UNAVAILABLE)
    }
  }

  async function close(sessionId: string): Promise<void> {
    const pending = sessions.get(sessionId)
    sessions.delete(sessionId)
    const b = await pending?.catch(() => null)
    if (!b) return
    await b.browser.close().catch(() => {}) // a browser already disconnected refuses; the kill below ends it either way
    await b.proc.kill().catch((err) => deps.log.warn({ err, component: 'browser', session_id: sessionId }, 'stopping the session browser failed'))
  }

  return {
    async page(sessionId, sandbox) {
      let pending = sessions.get(sessionId)
      if (!pending) {
        const mine: Promise<SessionBrowser> = sandbox().then((s) => start(sessionId, s, () => sessions.get(sessionId) === mine))
        pending = mine
        sessions.set(sessionId, mine)
        mine.catch(() => {
          if (sessions.get(sessionId) === mine) sessions.delete(sessionId)
        })
      }
      const b = await pending
      if (b.page.isClosed()) b.page = await (b.browser.contexts()[0] ?? (await b.browser.newContext())).newPage()
      return b.page
    },
    close,
    async closeAll() {
      await Promise.all([...sessions.keys()].map(close))
    },
  }
}
