import { it } from 'node:test'
import assert from 'node:assert/strict'
import type { ChangeWindow, Sandbox } from '../src/sandbox/sandbox.ts'
import { EarlyWindow } from '../src/runner/early-window.ts'
import { bash as bashTool } from '../src/tools/builtin/bash.ts'

/**
 * A step's first bash call has its change window opened while the step is persisted. Whatever
 * happens to the call, every window opened is closed exactly once, and a window is only ever
 * given to the call, and the sandbox, it was opened for.
 */
function fakeSandbox(openMs = 0) {
  const windows: Array<{ closed: number }> = []
  const sandbox = {
    async openChanges(): Promise<ChangeWindow> {
      if (openMs) await new Promise((r) => setTimeout(r, openMs))
      const w = { closed: 0 }
      windows.push(w)
      return {
        close: async () => {
          w.closed++
          return []
        },
      }
    },
  } as unknown as Sandbox
  return { sandbox, windows }
}

const bash = (id: string) => ({ toolCallId: id, toolName: 'bash', input: { command: 'true' } })
const write = (id: string) => ({ toolCallId: id, toolName: 'write_file', input: {} })

it('gives the window to its own bash call, once, and opens none for a step led by another tool', async () => {
  const a = fakeSandbox()
  const early = new EarlyWindow(async () => a.sandbox)
  early.open('ses', [write('w1'), bash('b1')])
  assert.equal(await early.take('b1', a.sandbox), null, 'only a step whose first call is bash')
  assert.equal(a.windows.length, 0)
  early.open('ses', [bash('b2'), bash('b3')])
  assert.equal(await early.take('b3', a.sandbox), null, 'not the second call')
  const window = await early.take('b2', a.sandbox)
  assert.ok(window)
  assert.equal(await early.take('b2', a.sandbox), null, 'taken once')
  await window.close()
  early.drop()
  await new Promise((r) => setImmediate(r))
  assert.equal(a.windows[0]!.closed, 1, 'closed by its taker, and not again')
})

it('closes a window nobody took, and one opened over a sandbox that is no longer the workspace’s', async () => {
  const a = fakeSandbox()
  const b = fakeSandbox()
  const early = new EarlyWindow(async () => a.sandbox)
  early.open('ses', [bash('b1')])
  early.drop()
  early.open('ses', [bash('b2')])
  // A new step's window replaces the untaken one.
  early.open('ses', [bash('b3')])
  assert.equal(await early.take('b3', b.sandbox), null, 'the workspace came back as another sandbox')
  await new Promise((r) => setImmediate(r))
  assert.deepEqual(
    a.windows.map((w) => w.closed),
    [1, 1, 1],
  )
})

it('opens nothing when the workspace is not up, and the call opens its own', async () => {
  const early = new EarlyWindow(async () => null)
  early.open('ses', [bash('b1')])
  const { sandbox } = fakeSandbox()
  assert.equal(await early.take('b1', sandbox), null)
})

it('closes a window its bash call took but never used (arguments refused), once the call is over', async () => {
  const a = fakeSandbox()
  const early = new EarlyWindow(async () => a.sandbox)
  early.open('ses', [bash('b1')])
  const window = await early.take('b1', a.sandbox)
  const out = await bashTool.run({ timeout_seconds: 99_999 }, { sandbox: a.sandbox, mount: '/workspace', signal: new AbortController().signal, seen: new Map(), window })
  assert.equal(out.isError, true)
  early.drop()
  await new Promise((r) => setImmediate(r))
  assert.deepEqual(
    a.windows.map((w) => w.closed),
    [1],
  )
})

it('a slow window taken by one step never costs the next step its own', async () => {
  const a = fakeSandbox(30)
  const early = new EarlyWindow(async () => a.sandbox)
  early.open('ses', [bash('b1')])
  const taking = early.take('b1', a.sandbox)
  // The next step's window is opened while the first is still on its way.
  early.open('ses', [bash('b2')])
  const first = await taking
  assert.ok(first)
  assert.ok(await early.take('b2', a.sandbox), 'the next step still has its window')
  early.drop()
  await new Promise((r) => setImmediate(r))
  assert.deepEqual(
    a.windows.map((w) => w.closed),
    [0, 1],
    'the first, taken and still open, is its taker’s; the second, left open by its taker, is closed by drop',
  )
})
