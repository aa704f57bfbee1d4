import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { opaqueFolders } from './layer-opaque.ts'

const asRoot = process.getuid?.() === 0

test('names the folders marked opaque, and only those', { skip: asRoot ? false : 'trusted.* attributes need root' }, async () => {
  const upper = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-opaque-'))
  try {
    for (const d of ['etc', 'etc/apt', 'usr']) fs.mkdirSync(path.join(upper, d))
    execFileSync('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', path.join(upper, 'etc/apt')])
    fs.symlinkSync('/etc', path.join(upper, 'link'))
    assert.deepEqual(await opaqueFolders(upper, ['etc', 'etc/apt', 'usr', 'link', 'missing']), ['etc/apt'])
  } finally {
    fs.rmSync(upper, { recursive: true, force: true })
  }
})

test('a layer that cannot be read is a failure, not "nothing opaque", and a long list perl never reads does not take the process down', async () => {
  const gone = path.join(os.tmpdir(), `warren-opaque-gone-${process.pid}`)
  // Far more than a pipe holds: perl ends before reading it, and the write meets a closed pipe.
  const many = Array.from({ length: 20_000 }, (_, i) => `folder/${i}/${'x'.repeat(20)}`)
  await assert.rejects(opaqueFolders(gone, many), /cannot open the layer/)
})
