// The content-addressed core of checkpoints (src/checkpoints/), on its own: a workspace folder's
// manifest, its contents stored once in the blob store of each dialect, written back elsewhere,
// built again from what changed, and hostile manifests and trees.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { openStore, type Store } from '../src/db/database.ts'
import { localBlobStore } from '../src/artifacts/blob-store.ts'
import { pickBlobStore } from '../src/artifacts/database-blob-store.ts'
import { randomText } from '../src/shared/ids.ts'
import { contentStore, type ContentStore } from '../src/checkpoints/content-store.ts'
import { contentCache } from '../src/checkpoints/content-cache.ts'
import { buildManifest, updateManifest } from '../src/checkpoints/read-tree.ts'
import { materialize } from '../src/checkpoints/materialize.ts'
import { diffManifests } from '../src/checkpoints/diff-manifests.ts'
import { BadManifest, manifestContents, type FileEntry, type Manifest } from '../src/checkpoints/manifest.ts'
import { forEachDialect, PG_URL } from './harness.ts'
import { removeSharedStore } from './restart-store.ts'

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex')

/** Every entry below `root`, read with plain lstat (not the code under test): type, mode, size and sha256 or link target. */
function listing(root: string): string[] {
  const out: string[] = [`. ${(fs.lstatSync(root).mode & 0o7777).toString(8)}`]
  const walk = (rel: string) => {
    for (const name of fs.readdirSync(path.join(root, rel)).sort()) {
      const p = rel ? `${rel}/${name}` : name
      const st = fs.lstatSync(path.join(root, p))
      const mode = (st.mode & 0o7777).toString(8)
      if (st.isSymbolicLink()) out.push(`${p} link -> ${fs.readlinkSync(path.join(root, p))}`)
      else if (st.isDirectory()) {
        out.push(`${p} dir ${mode}`)
        walk(p)
      } else out.push(`${p} file ${mode} ${st.size} ${sha(fs.readFileSync(path.join(root, p)))}`)
    }
  }
  walk('')
  return out
}

/** A tree of every kind a manifest names: files and modes, an empty folder, links in and out, a large file. */
function makeTree(root: string): void {
  fs.mkdirSync(path.join(root, 'src/lib'), { recursive: true })
  fs.mkdirSync(path.join(root, 'empty'))
  fs.mkdirSync(path.join(root, 'node_modules/pkg'), { recursive: true })
  for (let i = 0; i < 30; i++) fs.writeFileSync(path.join(root, `src/lib/f${i}.txt`), randomBytes(500 + i * 37))
  fs.writeFileSync(path.join(root, 'node_modules/pkg/index.js'), 'module.exports = 1\n')
  fs.writeFileSync(path.join(root, 'run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 })
  fs.writeFileSync(path.join(root, 'secret.txt'), 'mine', { mode: 0o600 })
  fs.writeFileSync(path.join(root, 'same-a.txt'), 'twice')
  fs.writeFileSync(path.join(root, 'same-b.txt'), 'twice')
  fs.writeFileSync(path.join(root, 'empty-file'), '')
  fs.chmodSync(path.join(root, 'empty'), 0o750)
  fs.symlinkSync('src/lib/f1.txt', path.join(root, 'link-in'))
  fs.symlinkSync('/etc/hostname', path.join(root, 'link-out'))
  fs.symlinkSync('nowhere', path.join(root, 'src/dangling'))
  fs.writeFileSync(path.join(root, 'big.bin'), randomBytes(9 * 1024 * 1024))
}

/** A content store whose reads are counted: what a restore fetched. */
function counted(store: ContentStore): { store: ContentStore; opened: string[] } {
  const opened: string[] = []
  return {
    opened,
    store: { ...store, open: (h) => (opened.push(h), store.open(h)), getMany: (hs) => (opened.push(...hs), store.getMany(hs)) },
  }
}

forEachDialect('checkpoint contents', (dialect) => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-ckpt-'))
  const pgSchema = `t_${randomText(12)}`
  let store: Store
  let contents: ContentStore
  const ws = path.join(dataDir, 'ws')
  let first: Manifest
  let firstAdded: { contents: number; bytes: number }
  before(async () => {
    store = await openStore(dialect === 'postgres' ? { dataDir, databaseUrl: PG_URL, pgSchema } : { dataDir })
    contents = contentStore(pickBlobStore(store, dataDir, 'contents'))
    fs.mkdirSync(ws)
    makeTree(ws)
  })
  after(async () => {
    await store?.close()
    await removeSharedStore(dialect, dataDir, pgSchema)
  })

  it('stores a tree once and writes it back elsewhere byte for byte, fetching only what a cache lacks', async () => {
    const writer = contents.writer()
    first = (await buildManifest(ws, writer.sink))!
    firstAdded = await writer.finish()
    const unique = manifestContents(first)
    assert.equal(firstAdded.contents, unique.size, 'each content stored once (the two equal files are one)')
    assert.equal(firstAdded.bytes, [...unique.values()].reduce((a, b) => a + b, 0))
    const big = first.entries.find((e) => e.path === 'big.bin') as FileEntry
    assert.ok((big.chunks?.length ?? 0) >= 2, 'a large file is stored in chunks')
    assert.equal((await contents.missing(unique.keys())).size, 0)

    // The manifest as one blob, read back whole.
    const { key } = await contents.putManifest(first)
    assert.deepEqual(await contents.getManifest(key), first)
    assert.equal((await contents.putManifest(first)).key, key, 'the same manifest is the same blob')

    // The same tree read again adds nothing to the store.
    const again = contents.writer()
    await buildManifest(ws, again.sink)
    assert.deepEqual(await again.finish(), { contents: 0, bytes: 0 })

    const cache = contentCache(path.join(dataDir, 'cache'))
    const cold = counted(contents)
    const into = path.join(dataDir, 'restored/a')
    assert.equal(await materialize(first, into, { store: cold.store, cache }), true)
    assert.deepEqual(listing(into), listing(ws))
    assert.equal(cold.opened.length, unique.size, 'a cold cache fetches every content')
    const warm = counted(contents)
    assert.equal(await materialize(first, path.join(dataDir, 'restored/b'), { store: warm.store, cache }), true)
    assert.deepEqual(listing(path.join(dataDir, 'restored/b')), listing(ws))
    assert.equal(warm.opened.length, 0, 'a warm cache fetches nothing')
    assert.equal(await materialize(first, ws, { store: warm.store, cache }), false, 'a folder that holds anything is not written')
  })

  it('after 10 changed files, reads and stores only those, and the manifest equals a full rebuild', async () => {
    let changedBytes = 0
    const write = (rel: string, bytes: Buffer) => {
      fs.mkdirSync(path.dirname(path.join(ws, rel)), { recursive: true })
      fs.writeFileSync(path.join(ws, rel), bytes)
      changedBytes += bytes.length
    }
    const changed = ['src/lib/f0.txt', 'src/lib/f1.txt', 'src/lib/f2.txt', 'src/lib/f3.txt', 'src/lib/f4.txt', 'run.sh', 'new/deep/a.txt', 'new/b.txt']
    for (const rel of changed) write(rel, randomBytes(2000))
    fs.rmSync(path.join(ws, 'src/lib/f5.txt'))
    fs.rmSync(path.join(ws, 'same-a.txt'))
    changed.push('src/lib/f5.txt', 'same-a.txt')

    const writer = contents.writer()
    const next = (await updateManifest(ws, first, changed, writer.sink))!
    const added = await writer.finish()
    assert.deepEqual(next, await buildManifest(ws), 'the incremental manifest is the full one')
    assert.equal(added.contents, 8)
    assert.equal(added.bytes, changedBytes, 'only the changed bytes are stored')
    assert.deepEqual(diffManifests(first, next), { files_changed: 10, bytes_added: changedBytes })
    assert.deepEqual(diffManifests(null, first).bytes_added, firstAdded.bytes)
  })
})

describe('checkpoint manifests', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-ckpt-'))
  // Retries: a swapper's last mv may still land as the folder goes.
  after(() => fs.rmSync(tmp, { recursive: true, force: true, maxRetries: 5 }))

  it('shares the chunks of a large file rewritten or shifted in the middle', async () => {
    const dir = path.join(tmp, 'large')
    fs.mkdirSync(dir)
    const file = path.join(dir, 'data.bin')
    const bytes = randomBytes(12 * 1024 * 1024)
    fs.writeFileSync(file, bytes)
    const chunksOf = async () => ((await buildManifest(dir))!.entries[0] as FileEntry).chunks!
    const before = await chunksOf()
    const fresh = async () => {
      const known = new Set(before.map((c) => c.hash))
      const now = await chunksOf()
      return { total: now.length, fresh: now.filter((c) => !known.has(c.hash)).length }
    }
    assert.ok(before.length >= 5, `12 MiB in ${before.length} chunks`)
    // 4 KiB rewritten in place in the middle.
    const fd = fs.openSync(file, 'r+')
    fs.writeSync(fd, randomBytes(4096), 0, 4096, 6 * 1024 * 1024)
    fs.closeSync(fd)
    const rewritten = await fresh()
    assert.ok(rewritten.fresh <= 2, `rewritten: ${rewritten.fresh} of ${rewritten.total} chunks new`)
    // 100 bytes inserted in the middle: what follows shifts, and chunks cut by offset would all change.
    fs.writeFileSync(file, Buffer.concat([bytes.subarray(0, 6 * 1024 * 1024), randomBytes(100), bytes.subarray(6 * 1024 * 1024)]))
    const shifted = await fresh()
    assert.ok(shifted.fresh <= 2, `shifted: ${shifted.fresh} of ${shifted.total} chunks new`)
  })

  it('refuses hostile manifests whole, writing nothing anywhere', async () => {
    const blobs = contentStore(localBlobStore(path.join(tmp, 'blobs')))
    const cache = contentCache(path.join(tmp, 'hostile-cache'))
    const writer = blobs.writer()
    const h = sha(Buffer.from('x'))
    await writer.sink(h, Buffer.from('x'))
    await writer.finish()
    const file = (p: string, extra: object = {}) => ({ path: p, type: 'file', mode: 0o644, size: 1, hash: h, ...extra })
    const dir = (p: string) => ({ path: p, type: 'dir', mode: 0o755 })
    const cases: Record<string, unknown[]> = {
      'a parent path': [file('../escape')],
      'a parent path deeper': [dir('a'), file('a/../../escape')],
      'an absolute path': [file('/tmp/escape')],
      'an empty path': [file('')],
      'a dot path': [file('./x')],
      'a doubled slash': [dir('a'), file('a//x')],
      'a path named twice': [file('x'), file('x')],
      'a file under a link': [{ path: 'l', type: 'symlink', mode: 0o777, target: tmp }, file('l/escape')],
      'a file under a file': [file('x'), file('x/y')],
      'a file with no folder': [file('nowhere/x')],
      'an unknown type': [{ path: 'x', type: 'fifo', mode: 0o644 }],
      'chunks that do not add up': [file('x', { size: 5, chunks: [{ hash: h, size: 1 }] })],
      'a bad hash': [file('x', { hash: '../../etc/passwd' })],
    }
    const parent = path.join(tmp, 'hostile')
    fs.mkdirSync(parent)
    for (const [name, entries] of Object.entries(cases)) {
      const into = path.join(parent, 'ws')
      await assert.rejects(materialize({ version: 1, mode: 0o755, entries } as Manifest, into, { store: blobs, cache }), BadManifest, name)
      assert.deepEqual(fs.readdirSync(parent), [], `${name}: nothing written beside the folder`)
      for (const escape of [path.join(tmp, 'escape'), '/tmp/escape']) assert.equal(fs.existsSync(escape), false, `${name}: nothing written outside`)
    }
    // Modes beyond the safe bits are masked: no setuid file comes back as root's.
    const into = path.join(parent, 'ws')
    const masked = { version: 1, mode: 0o106755, entries: [dir('d'), file('d/x', { mode: 0o104755 }), file('y', { mode: 0o2777 })] } as Manifest
    assert.equal(await materialize(masked, into, { store: blobs, cache }), true)
    assert.deepEqual(listing(into), [`. 755`, `d dir 755`, `d/x file 755 1 ${h}`, `y file 777 1 ${h}`])
  })

  it('never follows a folder or file swapped for a link while it walks', async () => {
    const outside = path.join(tmp, 'outside')
    fs.mkdirSync(outside)
    const secret = randomBytes(64)
    fs.writeFileSync(path.join(outside, 'secret'), secret)
    const ws = path.join(tmp, 'swapped')
    fs.mkdirSync(path.join(ws, 'd'), { recursive: true })
    fs.writeFileSync(path.join(ws, 'd/inner'), 'in')
    fs.writeFileSync(path.join(ws, 'f'), 'in')
    // Swaps a folder and a file for links out of the workspace and back, as fast as it can.
    const swapper = spawn('sh', ['-c', `cd ${ws} && while :; do mv d d.real; ln -s ${outside} d; ln -sfn ${outside}/secret f.l; mv f f.real; mv f.l f; rm d; mv d.real d; mv f.real f; done`], { stdio: 'ignore' })
    try {
      const seen = { link: 0, dir: 0, builds: 0 }
      const stored: string[] = []
      while ((seen.link < 3 || seen.dir < 3 || seen.builds < 50) && seen.builds < 5000) {
        const m = (await buildManifest(ws, (hash) => void stored.push(hash)))!
        seen.builds++
        const d = m.entries.find((e) => e.path === 'd')
        if (d?.type === 'symlink') seen.link++
        if (d?.type === 'dir') seen.dir++
        for (const e of m.entries) assert.ok(!e.path.endsWith('secret'), `${e.path}: a folder outside was walked`)
      }
      assert.ok(seen.link >= 3 && seen.dir >= 3, `the swap was seen both ways (${JSON.stringify(seen)})`)
      assert.ok(!stored.includes(sha(secret)), 'a file outside was never read')
    } finally {
      const exited = swapper.exitCode !== null || swapper.signalCode !== null ? null : new Promise((r) => swapper.once('exit', r))
      swapper.kill('SIGKILL')
      await exited
    }
  })

  it('reads 20,000 small files whole, and again after 10 changes (timed)', async () => {
    const ws = path.join(tmp, 'many')
    for (let d = 0; d < 100; d++) {
      fs.mkdirSync(path.join(ws, `d${d}`), { recursive: true })
      for (let f = 0; f < 200; f++) fs.writeFileSync(path.join(ws, `d${d}/f${f}.txt`), `file ${d}/${f}\n`.repeat(10))
    }
    let t = performance.now()
    const full = (await buildManifest(ws))!
    const fullMs = performance.now() - t
    const changed = Array.from({ length: 10 }, (_, i) => `d${i * 7}/f${i}.txt`)
    for (const rel of changed) fs.appendFileSync(path.join(ws, rel), 'changed\n')
    t = performance.now()
    const next = (await updateManifest(ws, full, changed))!
    const nextMs = performance.now() - t
    process.stdout.write(`# manifest of 20,000 small files: ${fullMs.toFixed(0)} ms; after 10 changes, incremental: ${nextMs.toFixed(0)} ms\n`)
    assert.equal(diffManifests(full, next).files_changed, 10)
  })
})
