// Packing a workspace for its snapshot: a large tree read by a slow reader (a put into the store
// takes its time) comes out whole. node-tar's Pack, paused by its reader, used to stall for good on
// a tree of 20,000 files, and the snapshot at a graceful stop on PostgreSQL with it.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createGunzip } from 'node:zlib'
import { setTimeout as sleep } from 'node:timers/promises'
import { Parser } from 'tar'
import { packFolder } from '../src/sandbox/local/workspace-pack.ts'

it('packs 20,000 files whole for a reader that keeps falling behind', async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-pack-'))
  try {
    fs.mkdirSync(path.join(root, 'tree'))
    for (let i = 1; i <= 20_000; i++) fs.writeFileSync(path.join(root, 'tree', String(i)), i % 1000 === 0 ? `file ${i}\n` : '')
    const archive = await packFolder(root)
    assert.ok(archive)
    const names = new Map<string, string>()
    const parser = new Parser({
      onReadEntry: (e) => {
        let text = ''
        e.on('data', (c: Buffer) => (text += c.toString()))
        e.on('end', () => names.set(e.path, text))
      },
    })
    const gunzip = createGunzip()
    gunzip.pipe(parser)
    const parsed = new Promise((r) => parser.on('end', r))
    for await (const chunk of archive) {
      // A reader slower than the walk: the archive waits on it.
      await sleep(1)
      if (!gunzip.write(chunk)) await new Promise((r) => gunzip.once('drain', r))
    }
    gunzip.end()
    await parsed
    const files = [...names.keys()].filter((n) => n.startsWith('tree/') && n !== 'tree/')
    assert.equal(files.length, 20_000)
    assert.equal(names.get('tree/20000'), 'file 20000\n')
    assert.equal(names.get('tree/19999'), '')
  } finally {
    fs.rmSync(root, { recursive: true, force: true })
  }
})
