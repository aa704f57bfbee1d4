// The image's User resolved from its layers as the overlay shows them, read without following
// anything: the cases a layer (the registry's or the agent's) may hold.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { resolveImageUser } from './image-user.ts'

const asRoot = process.getuid?.() === 0

it('resolves names, numbers and groups top layer first; a whiteout, a link or an unknown name is no user', { skip: asRoot ? false : 'needs root (mknod)' }, async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-image-user-'))
  try {
    const layer = (name: string, files: Record<string, string>) => {
      const dir = path.join(root, name)
      fs.mkdirSync(path.join(dir, 'etc'), { recursive: true })
      for (const [f, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, 'etc', f), text)
      return dir
    }
    const low = layer('low', { passwd: 'root:x:0:0::/:/bin/sh\nold:x:500:500::/:/bin/sh\n', group: 'root:x:0:\n' })
    const high = layer('high', { passwd: 'root:x:0:0::/:/bin/sh\nbuilder:x:1234:2345::/h:/bin/sh\n', group: 'tools:x:3456:\n' })
    const empty = layer('empty', {})
    assert.deepEqual(await resolveImageUser('builder', [empty, high, low]), { uid: 1234, gid: 2345 })
    assert.deepEqual(await resolveImageUser('builder:tools', [high, low]), { uid: 1234, gid: 3456 })
    assert.deepEqual(await resolveImageUser('1234', [high, low]), { uid: 1234, gid: 2345 }, "a number takes its entry's gid")
    assert.deepEqual(await resolveImageUser('77:88', [high, low]), { uid: 77, gid: 88 })
    assert.deepEqual(await resolveImageUser('77', [high, low]), { uid: 77, gid: 0 })
    await assert.rejects(resolveImageUser('old', [high, low]), /names a user its \/etc\/passwd does not have/, 'the top layer hides the lower file')
    await assert.rejects(resolveImageUser('builder:nogroup', [high, low]), /names a group its \/etc\/group does not have/)
    await assert.rejects(resolveImageUser('70000', [high]), /past the 65536 ids/)
    // A whiteout of the file hides every lower one.
    const gone = layer('gone', {})
    execFileSync('mknod', [path.join(gone, 'etc', 'passwd'), 'c', '0', '0'])
    await assert.rejects(resolveImageUser('builder', [gone, high]), /does not have/)
    // A link is not followed, wherever it points: the host's /etc/passwd has root, not read here.
    const linked = layer('linked', {})
    fs.symlinkSync('/etc/passwd', path.join(linked, 'etc', 'passwd'))
    await assert.rejects(resolveImageUser('root', [linked]), /does not have/)
    const linkedEtc = path.join(root, 'linked-etc')
    fs.mkdirSync(linkedEtc)
    fs.symlinkSync('/etc', path.join(linkedEtc, 'etc'))
    await assert.rejects(resolveImageUser('root', [linkedEtc, high]), /does not have/, 'a link at /etc hides the lower etc and is not followed')
  } finally {
    fs.rmSync(root, { recursive: true, force: true })
  }
})
