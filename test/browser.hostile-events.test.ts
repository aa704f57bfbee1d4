// The browser's DevTools pipe carries what the browser says, and the browser is the workspace's:
// a workspace process runs as its uid and, on a kernel without YAMA, may ptrace it and make it
// send anything. An event playwright chokes on rejected a promise nobody awaits, which ended the
// whole service. The hub runs in a process of its own here (the test runner would take any
// unhandled rejection for a failed test), over a real Chromium on the host.
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { chromiumAvailable } from '../src/tools/browser/browser-hub.ts'

const skip = !chromiumAvailable() ? 'needs Chromium' : false

/** Runs the hostile browser's child in `mode`: its exit code and everything it printed. */
async function runChild(mode: string): Promise<{ code: number | null; out: string }> {
  const child = spawn(process.execPath, ['test/fakes/hostile-cdp-child.ts', mode], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout.on('data', (d: Buffer) => (out += d.toString()))
  child.stderr.on('data', (d: Buffer) => (out += d.toString()))
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)))
  return { code, out }
}

describe('the browser tools against hostile DevTools events', { skip }, () => {
  it('an event playwright chokes on is logged, and the service and its browser run on', async () => {
    const { code, out } = await runChild('event')
    assert.match(out, /before: 2/, `control: the browser answered first\n${out}`)
    assert.match(out, /logged: playwright refused what a session browser sent/, out)
    assert.match(out, /after: 4/, out)
    assert.equal(code, 0, out)
  })

  it('a rejection that is not playwright’s still ends the process, as Node’s default does', async () => {
    const { code, out } = await runChild('other')
    assert.match(out, /before: 2/, out)
    assert.match(out, /a rejection of the service’s own/, out)
    assert.doesNotMatch(out, /logged:|after:/, out)
    assert.notEqual(code, 0, out)
  })
})
