// Run as a process of its own by browser.hostile-events.test.ts: the browser hub as the service
// holds it (its unhandled rejections handled as startServer has them), over a real Chromium run on
// the host, whose answers pass through a stream the test's workspace message is slipped into.
// Prints one line per step; `mode` other: a rejection that has nothing to do with playwright.
import { spawn } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { PassThrough, type Duplex } from 'node:stream'
import { browserHub } from '../../src/tools/browser/browser-hub.ts'
import { survivePlaywrightRejections } from '../../src/tools/browser/playwright-rejections.ts'
import type { Sandbox } from '../../src/sandbox/sandbox.ts'

const say = (line: string) => process.stdout.write(`${line}\n`)
let heard!: () => void
const logged = new Promise<void>((resolve) => (heard = resolve))
const log = {
  info: () => {},
  warn: () => {},
  error: (_: object, msg: string) => {
    say(`logged: ${msg}`)
    heard()
  },
}
survivePlaywrightRejections(log)

/** A sandbox whose spawn runs the command on the host, the browser's answers going through `answers`. */
function hostSandbox(answers: PassThrough): Sandbox {
  const spawnIt = async (req: { command: string; env?: Record<string, string> }) => {
    const home = mkdtempSync(path.join(tmpdir(), 'warren-browser-'))
    const command = req.command.replaceAll('/tmp/warren-browser', `${home}/profile`)
    const child = spawn('sh', ['-c', command], { env: { ...process.env, ...req.env, HOME: home }, stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'], detached: true })
    ;(child.stdio[4] as Duplex).pipe(answers)
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
    return {
      stdin: new PassThrough(),
      stdout: child.stdout!,
      stderr: child.stderr!,
      fds: [child.stdio[3] as Duplex, answers as unknown as Duplex],
      exited,
      kill: async () => {
        if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGKILL')
        await exited
      },
    }
  }
  return { spawn: spawnIt } as unknown as Sandbox
}

const hub = browserHub({ log })
try {
  const answers = new PassThrough()
  const page = await hub.page('ses_a', async () => hostSandbox(answers))
  say(`before: ${await page.evaluate('1 + 1')}`)
  if (process.argv[2] === 'other') void Promise.reject(new Error('a rejection of the service’s own'))
  // Well shaped (an event, its params an object), without the target playwright reads.
  else answers.write(`${JSON.stringify({ method: 'Target.attachedToTarget', params: {} })}\0`)
  await logged
  say(`after: ${await page.evaluate('2 + 2')}`)
} finally {
  await hub.closeAll()
}
