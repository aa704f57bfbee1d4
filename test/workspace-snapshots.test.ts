// Workspace snapshots: a workspace outlives the loss of its node's disk, brought back from the
// store into a fresh sandbox; a crafted archive writes nothing outside the workspace.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import { Header, Pack, ReadEntry } from 'tar'
import { randomText } from '../src/shared/ids.ts'
import type { Sandbox } from '../src/sandbox/sandbox.ts'
import { pickBlobStore } from '../src/artifacts/database-blob-store.ts'
import { getSnapshot, putSnapshot } from '../src/workspaces/workspace-snapshots.store.ts'
import { forEachDialect, onPostgres, startWarren, type Warren } from './harness.ts'
import { removeSharedStore } from './restart-store.ts'
import { connectModel, hasEvent } from './fixtures.ts'
import { hostWorkspace } from './host-workspace.ts'

/** Every kind of entry a workspace holds. */
const MAKE = [
  'cd /workspace',
  "printf 'hello\\n' > a.txt && chmod 640 a.txt",
  "mkdir -p dir/sub && printf 'nested' > dir/sub/b.md && chmod 700 dir",
  'head -c 300000 /dev/urandom > bin.dat',
  "printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod 755 run.sh",
  'ln -s a.txt rel-link && ln -s dir/sub rel-dir-link && ln -s /etc/hostname out-link',
  'mkdir empty && mkdir -p .git/refs/heads && printf "ref: refs/heads/main\\n" > .git/HEAD',
  "mkdir -p node_modules/m && printf 'module.exports = 1\\n' > node_modules/m/index.js",
].join(' && ')

/** What the sandbox sees: every entry with its type, mode, size and link target, and each file's hash. */
const MANIFEST = "cd /workspace && find . -mindepth 1 -printf '%p %y %m %s %l\\n' | sort && find . -type f -exec sha256sum {} + | sort"

async function run(sandbox: Sandbox, command: string): Promise<string> {
  const r = await sandbox.exec({ command, timeoutMs: 60_000 })
  assert.equal(r.exitCode, 0, `${command}: ${r.stderr.toString()}`)
  return r.stdout.toString()
}

async function newSession(w: Warren): Promise<string> {
  const res = await w.inject({ method: 'POST', url: '/v1/sessions', payload: {} })
  assert.equal(res.statusCode, 201, res.body)
  const id = res.json().id as string
  await hasEvent(w, id, 'sandbox.created')
  return id
}

forEachDialect('workspace snapshots', (dialect) => {
  it('brings a workspace back, byte for byte with modes, links, empty folders and .git, after its host folder is lost', async () => {
    const firstDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-snap-a-'))
    // On PostgreSQL the second run is another node: its own data folder, nothing of the first's disk.
    const secondDir = dialect === 'postgres' ? fs.mkdtempSync(path.join(os.tmpdir(), 'warren-snap-b-')) : firstDir
    const pgSchema = `t_${randomText(12)}`
    const env = { WARREN_IDLE_PAUSE_MS: '600000' }
    const first = await startWarren(dialect, { dataDir: firstDir, sandboxPrefix: `s${randomText(4)}`, pgSchema, env })
    let second: Warren | null = null
    try {
      await connectModel(first)
      const id = await newSession(first)
      const sandbox = await first.workspaces.acquire(id)
      await run(sandbox, MAKE)
      const before = await run(sandbox, MANIFEST)
      assert.match(before, /\.\/out-link l 777 \d+ \/etc\/hostname/, 'control: the manifest shows links as links')
      assert.match(before, /\.\/empty d 755/)
      assert.match(before, /\.\/run\.sh f 755/)

      assert.equal(await first.snapshots.latest(id), null)
      const saved = await first.snapshots.save(id)
      assert.ok(saved && saved.bytes > 0)
      assert.deepEqual(await first.snapshots.latest(id), saved)
      // A later save replaces the snapshot, and the bytes of the one before are removed.
      const snapshotStore = pickBlobStore(first.store, firstDir, 'snapshots')
      const oldKey = (await getSnapshot(first.store.db, id))!.blobKey
      await run(sandbox, "printf 'late\\n' > /workspace/late.txt")
      const after = await run(sandbox, MANIFEST)
      await first.snapshots.save(id)
      const newKey = (await getSnapshot(first.store.db, id))!.blobKey
      assert.notEqual(newKey, oldKey)
      assert.equal(await snapshotStore.exists(oldKey), false, 'the replaced snapshot’s bytes are gone')
      assert.equal(await snapshotStore.exists(newKey), true)
      await first.close()

      // The node is gone, and its disk with it.
      if (dialect === 'postgres') fs.rmSync(firstDir, { recursive: true, force: true })
      else fs.rmSync(hostWorkspace(first, id), { recursive: true, force: true })
      second = await startWarren(dialect, { dataDir: secondDir, sandboxPrefix: `s${randomText(4)}`, pgSchema, env })
      assert.equal(fs.existsSync(hostWorkspace(second, id)), false)
      assert.equal(await second.snapshots.restore(id), true)
      assert.equal(await second.snapshots.restore(id), false, 'a workspace that holds files is never unpacked over')

      const fresh = await second.workspaces.acquire(id)
      assert.notEqual(fresh, sandbox)
      assert.equal(await run(fresh, MANIFEST), after, 'the same entries, modes, sizes, link targets and bytes')
      // The sandbox's own user owns the tree, and can work in it.
      assert.equal(await run(fresh, 'cd /workspace && find . ! -user "$(id -u)" | wc -l'), '0\n')
      assert.equal(await run(fresh, "cd /workspace && printf 'more' > dir/sub/new.txt && ./run.sh && cat rel-link"), 'ran\nhello\n')

      await second.snapshots.drop(id)
      assert.equal(await second.snapshots.latest(id), null)
      assert.equal(await pickBlobStore(second.store, secondDir, 'snapshots').exists(newKey), false, 'a dropped snapshot’s bytes are gone')
    } finally {
      await second?.close()
      await removeSharedStore(dialect, firstDir, pgSchema)
      fs.rmSync(secondDir, { recursive: true, force: true })
    }
  })

  it('unpacks a crafted archive without writing anything outside the workspace', async () => {
    const w = await startWarren(dialect)
    const outside = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-snap-outside-'))
    const absolute = path.join(outside, 'absolute.txt')
    try {
      const id = `ses_crafted${randomText(8)}`
      const dir = hostWorkspace(w, id)
      const escape = path.join(path.dirname(dir), 'escaped.txt')
      // The traps in order: a link out, then a file through it; `..`; an absolute path; a hard
      // link to a host file; a setuid file.
      const pack = new Pack({ portable: true, preservePaths: true, gzip: true })
      const entry = (head: ConstructorParameters<typeof Header>[0] & object, body?: string) => {
        const e = new ReadEntry(new Header({ mode: 0o644, mtime: new Date(), size: body ? Buffer.byteLength(body) : 0, ...head }))
        pack.add(e)
        if (body) e.write(Buffer.from(body))
        e.end()
      }
      entry({ path: 'ok.txt', type: 'File' }, 'fine\n')
      entry({ path: 'out', type: 'SymbolicLink', linkpath: outside, mode: 0o777 })
      entry({ path: 'out/through-link.txt', type: 'File' }, 'pwned\n')
      entry({ path: '../escaped.txt', type: 'File' }, 'pwned\n')
      entry({ path: absolute, type: 'File' }, 'pwned\n')
      entry({ path: 'hard', type: 'Link', linkpath: '/etc/hostname' })
      entry({ path: 'suid', type: 'File', mode: 0o4755 }, '#!/bin/sh\n')
      pack.end()
      const archive = Readable.from(pack, { objectMode: false })
      const blob = await pickBlobStore(w.store, w.dataDir, 'snapshots').put(archive, 1 << 20)
      await putSnapshot(w.store.db, { sessionId: id, blobKey: blob.key, takenAt: Date.now(), bytes: blob.size })

      assert.equal(await w.snapshots.restore(id), true)
      assert.deepEqual(fs.readdirSync(outside), [], 'nothing written through the link or at the absolute path')
      assert.equal(fs.existsSync(escape), false, 'nothing written above the workspace')
      assert.equal(fs.readFileSync(path.join(dir, 'ok.txt'), 'utf8'), 'fine\n')
      assert.equal(fs.existsSync(path.join(dir, 'hard')), false, 'hard links are left out')
      assert.equal(fs.statSync(path.join(dir, 'suid')).mode & 0o7777, 0o755, 'setuid is dropped')
      // The file meant to go through the link landed in a folder of its own, inside.
      assert.equal(fs.lstatSync(path.join(dir, 'out')).isDirectory(), true)
    } finally {
      await w.close()
      fs.rmSync(outside, { recursive: true, force: true })
    }
  })
})

onPostgres('workspace snapshots swept', () => {
  it('a sweep removes the snapshots of deleted sessions and old snapshot bytes nothing names, and nothing else', async () => {
    const w = await startWarren('postgres')
    try {
      await connectModel(w)
      const session = async () => {
        const res = await w.inject({ method: 'POST', url: '/v1/sessions', payload: {} })
        assert.equal(res.statusCode, 201, res.body)
        return res.json().id as string
      }
      const blobs = pickBlobStore(w.store, w.dataDir, 'snapshots')
      const put = (text: string) => blobs.put(Readable.from([Buffer.from(text)]), 1 << 20)
      const [kept, deleted] = [await session(), await session()]
      const keptBlob = await put(`kept ${randomText(8)}`)
      const deletedBlob = await put(`deleted ${randomText(8)}`)
      const unnamed = await put(`replaced long ago ${randomText(8)}`)
      const fresh = await put(`being saved now ${randomText(8)}`)
      for (const [sessionId, blob] of [[kept, keptBlob], [deleted, deletedBlob]] as const) await putSnapshot(w.store.db, { sessionId, blobKey: blob.key, takenAt: Date.now(), bytes: blob.size })
      // Old enough to sweep, all but the one a save may be about to name.
      const hourAgo = Date.now() - 3_600_000
      await w.store.db.updateTable('blobs').set({ created_at: hourAgo }).where('key', 'in', [keptBlob.key, deletedBlob.key, unnamed.key]).execute()
      // The session's deletion committed, and its node stopped before it dropped the snapshot.
      await w.store.db.updateTable('sessions').set({ deleted_at: Date.now() }).where('id', '=', deleted).execute()

      assert.deepEqual(await w.snapshots.sweep(), { sessions: 1, blobs: 1 })
      assert.equal(await w.snapshots.latest(deleted), null, "the deleted session's snapshot is gone")
      assert.equal(await blobs.exists(deletedBlob.key), false, 'and its bytes')
      assert.equal(await blobs.exists(unnamed.key), false, 'old bytes no snapshot names are gone')
      assert.equal(await blobs.exists(fresh.key), true, 'bytes stored a moment ago stay: a save may name them next')
      assert.ok(await w.snapshots.latest(kept), "a live session's snapshot stays")
      assert.equal(await blobs.exists(keptBlob.key), true, 'with its bytes')
      assert.deepEqual(await w.snapshots.sweep(), { sessions: 0, blobs: 0 }, 'a second sweep finds nothing')
    } finally {
      await w.close()
    }
  })
})
