import { it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { WorkspaceWatcher } from '../src/sandbox/local/workspace-watch.ts'

/** A watcher over a fresh folder, with what it reported. */
async function watcher(owner: string) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-watch-test-'))
  const changed: string[] = []
  let lost: (reason: string) => void = () => {}
  const gone = new Promise<string>((r) => (lost = r))
  const w = await WorkspaceWatcher.start(root, { changed: (rel) => void changed.push(rel), lost: (reason) => lost(reason) }, owner)
  const fenceDir = fs.readdirSync(os.tmpdir()).find((n) => n.startsWith(`warren-fence-${owner}-`))
  assert.ok(fenceDir, 'its fence folder')
  return { root, w, changed, gone, fenceDir: path.join(os.tmpdir(), fenceDir) }
}

it('a fence resolves only once every change made before it was reported, fence after fence', async () => {
  const { root, w, changed } = await watcher(`wt${process.pid}a`)
  try {
    for (let i = 0; i < 50; i++) {
      fs.writeFileSync(path.join(root, `f${i}`), 'x')
      await w.fence()
      assert.ok(changed.includes(`f${i}`), `f${i} reported before its fence resolved`)
    }
    // Fences asked together resolve together, in order.
    fs.writeFileSync(path.join(root, 'last'), 'x')
    await Promise.all([w.fence(), w.fence(), w.fence()])
    assert.ok(changed.includes('last'))
  } finally {
    w.close()
    fs.rmSync(root, { recursive: true, force: true })
  }
})

it('is lost for its fence folder removed from outside, not for a fence that timed out', { timeout: 60_000 }, async () => {
  const { root, w, gone, fenceDir } = await watcher(`wt${process.pid}b`)
  try {
    fs.rmSync(fenceDir, { recursive: true, force: true })
    const fence = w.fence()
    // Lost for what happened, not for a fence that never came back (its time-out).
    assert.match(await gone, /the fence (file "[ab]"|folder) went/)
    await assert.rejects(fence)
  } finally {
    w.close()
    fs.rmSync(root, { recursive: true, force: true })
  }
})
