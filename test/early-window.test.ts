import { it } from 'node:test'
import assert from 'node:assert/strict'
import type { ChangeWindow, Sandbox } from '../src/sandbox/sandbox.ts'
import { EarlyWindow } from '../src/runner/early-window.ts'

/**
 * A step's first bash call has its change window opened while the step is persisted. Whatever
 * happens to the call, every window opened is closed exactly once, and a window is only ever
 * given to the call, and the sandbox, it was opened for.
 */
function fakeSandbox() {
  const windows: Array<{ closed: number }> = []
  const sandbox = {
    async openChanges(): Promise<ChangeWindow> {
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
  early.drop()
  assert.equal(a.windows[0]!.closed, 0, 'a taken window is its taker’s to close')
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
