// A descriptor the service inherited without close-on-exec (a supervisor's pipe, a terminal's)
// was passed on through the spawner to every sandbox process: a workspace command could read or
// write whatever it led to. The sandbox provider runs in a process of its own here, started with
// such a pipe on fd 200.
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'

const skip = process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap']).status !== 0 ? 'needs bubblewrap' : false
const INHERITED = 200

describe('descriptors the service inherited', { skip }, () => {
  it('reach no sandbox process: not a command, not a spawned process, not the init', async () => {
    const stdio = Array.from({ length: INHERITED + 1 }, (_, i): 'pipe' | 'ignore' => (i === 1 || i === 2 || i === INHERITED ? 'pipe' : 'ignore'))
    const child = spawn(process.execPath, ['test/fakes/inherited-fd-child.ts'], { stdio })
    let out = ''
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()))
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()))
    const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)))
    assert.equal(code, 0, out)
    const line = (name: string) => out.match(new RegExp(`^${name}: (.*)$`, 'm'))?.[1]
    for (const name of ['command', 'spawned', 'init']) {
      // Control: each printed its descriptors (its own listing's pipe among them).
      assert.ok(line(name)?.startsWith('0 1 2'), `${name}\n${out}`)
      assert.ok(!line(name)!.split(/[\s/]+/).includes(String(INHERITED)), `${name} holds fd ${INHERITED}: ${line(name)}`)
    }
  })
})
