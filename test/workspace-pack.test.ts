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
import { execFileSync } from 'node:child_process'
import { packFolder } from '../src/sandbox/local/workspace-pack.ts'
import { unpackInto } from '../src/sandbox/local/workspace-unpack.ts'
import { hostId, insideId } from '../src/sandbox/local/layer-owners.ts'
import { Readable } from 'node:stream'
import zlib from 'node:zlib'
import { tarOf, type TarEntry } from './registry.ts'

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

// A sandbox's own layer over its image travels with its workspace: absolute entries, owners as the
// image sees them (so another root range can take them), whiteouts and opaque folders as OCI says.
it('packs a layer with its owners, whiteouts and opaque folders, and unpacks it onto other ids, nothing followed', { skip: process.getuid?.() !== 0 ? 'needs root (mknod, trusted.* attributes)' : false }, async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-layer-pack-'))
  try {
    const ws = path.join(root, 'ws')
    const upper = path.join(root, 'upper')
    fs.mkdirSync(ws)
    fs.writeFileSync(path.join(ws, 'a.txt'), 'in the workspace\n')
    fs.mkdirSync(path.join(upper, 'opt', 'tool'), { recursive: true })
    fs.writeFileSync(path.join(upper, 'opt', 'tool', 'x'), 'installed\n', { mode: 0o755 })
    fs.mkdirSync(path.join(upper, 'etc', 'fresh'), { recursive: true })
    fs.symlinkSync('/etc/shadow', path.join(upper, 'etc', 'link'))
    // As a root range at 400000 owns them: its root, its uid 1000, and the sandbox's own uid.
    const from = { base: 400_000, uid: 200_007 }
    fs.chownSync(upper, 400_000, 400_000)
    fs.chownSync(path.join(upper, 'opt', 'tool', 'x'), 401_000, 401_000)
    fs.lchownSync(path.join(upper, 'etc', 'link'), 200_007, 200_007)
    execFileSync('mknod', [path.join(upper, 'etc', 'hostname'), 'c', '0', '0'])
    execFileSync('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', path.join(upper, 'etc', 'fresh')])
    const archive = await packFolder(ws, { upper, ids: (h) => insideId(h, from) })
    assert.ok(archive)
    // Onto another range and another sandbox uid.
    const to = { base: 500_000, uid: 200_003 }
    const back = path.join(root, 'back')
    const layer = path.join(root, 'layer')
    assert.equal(await unpackInto(back, archive, { layer: { into: layer, owner: (n) => hostId(n, to) } }), true)
    assert.deepEqual(fs.readdirSync(back).sort(), ['a.txt'], 'the layer entries are not in the workspace')
    assert.equal(fs.readFileSync(path.join(layer, 'opt', 'tool', 'x'), 'utf8'), 'installed\n')
    const x = fs.statSync(path.join(layer, 'opt', 'tool', 'x'))
    assert.deepEqual([x.uid, x.gid, x.mode & 0o777], [501_000, 501_000, 0o755])
    assert.equal(fs.statSync(layer).uid, 500_000)
    const link = fs.lstatSync(path.join(layer, 'etc', 'link'))
    assert.ok(link.isSymbolicLink())
    assert.equal(link.uid, 200_003)
    const wh = fs.lstatSync(path.join(layer, 'etc', 'hostname'))
    assert.ok(wh.isCharacterDevice() && wh.rdev === 0, 'the whiteout is a 0/0 device again')
    assert.equal(execFileSync('getfattr', ['--only-values', '-n', 'trusted.overlay.opaque', path.join(layer, 'etc', 'fresh')]).toString(), 'y')
    assert.equal(execFileSync('getfattr', ['--absolute-names', '-d', '-m', 'trusted.', path.join(layer, 'opt')]).toString(), '', 'a folder not opaque stays so')
  } finally {
    fs.rmSync(root, { recursive: true, force: true })
  }
})

it('refuses a hostile layer in a snapshot whole: nothing written through a link, outside the layer, or as a device, and no workspace either', async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-layer-hostile-'))
  try {
    const outside = path.join(root, 'outside')
    fs.mkdirSync(outside)
    const hostile: Record<string, TarEntry[]> = {
      'through a link': [{ path: '/etc/', type: 'Directory' }, { path: '/etc/link', type: 'SymbolicLink', linkpath: outside }, { path: '/etc/link/evil', body: 'x' }],
      'a .. component': [{ path: '/a/../../../evil', body: 'x' }],
      'a device node': [{ path: '/dev/', type: 'Directory' }, { path: '/dev/sda', type: 'BlockDevice' }],
    }
    for (const [what, layerEntries] of Object.entries(hostile)) {
      const archive = Readable.from([zlib.gzipSync(tarOf([{ path: './', type: 'Directory' }, { path: 'ws.txt', body: 'ws' }, ...layerEntries]))])
      const ws = path.join(root, 'ws')
      const layer = path.join(root, 'layer')
      await assert.rejects(unpackInto(ws, archive, { layer: { into: layer, owner: (n) => n } }), Error, what)
      assert.equal(fs.existsSync(ws), false, `${what}: no workspace`)
      assert.deepEqual(fs.readdirSync(outside), [], `${what}: nothing outside`)
      assert.equal(fs.existsSync(path.join(root, 'evil')), false, `${what}: nothing beside`)
      fs.rmSync(layer, { recursive: true, force: true })
    }
  } finally {
    fs.rmSync(root, { recursive: true, force: true })
  }
})
