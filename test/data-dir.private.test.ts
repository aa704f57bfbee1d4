// The data folder holds conversations, tool output, the store and the key that seals its secrets:
// whatever the umask, another local user reads none of it. A fresh folder is made private; one an
// earlier version left open is tightened at start, and the log says so.
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { startWarren } from './harness.ts'
import { NODE_HEADER } from '../src/nodes/node.ts'

const modeOf = (file: string) => fs.statSync(file).mode & 0o777
const octal = (mode: number) => `0${mode.toString(8)}`

/** A pino logger writing its lines to `lines`, parsed. */
function capture(lines: { msg?: string; paths?: string[] }[]) {
  return { level: 'info', stream: { write: (line: string) => void lines.push(JSON.parse(line)) } }
}

describe('the data folder is private [sqlite]', () => {
  it('is made 0700 with the store, its -wal and -shm, the key file and the blob folders for the service user alone, under a loose umask', async (t) => {
    const parent = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-private-'))
    t.after(() => fs.rmSync(parent, { recursive: true, force: true }))
    const dataDir = path.join(parent, 'data')
    const umask = process.umask(0o000)
    t.after(() => process.umask(umask))
    const w = await startWarren('sqlite', { dataDir })
    t.after(() => w.close())
    process.umask(umask)
    // The harness minted its token: the -wal holds a write and the -shm is in use.
    assert.equal(octal(modeOf(dataDir)), '0700')
    for (const name of ['warren.db', 'warren.db-wal', 'warren.db-shm']) assert.equal(octal(modeOf(path.join(dataDir, name))), '0600', name)
    for (const name of ['artifacts', 'snapshots']) assert.equal(octal(modeOf(path.join(dataDir, name))), '0700', name)
    // The harness seals with a key of its own; the key file is what a deployment without one gets.
    const { loadEncryptionKey } = await import('../src/shared/encryption-key.ts')
    loadEncryptionKey(w.config)
    assert.equal(octal(modeOf(path.join(dataDir, 'encryption.key'))), '0600')
  })

  it('tightens a folder and files left readable by others at start, and says which in the log', async (t) => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-private-'))
    t.after(() => fs.rmSync(dataDir, { recursive: true, force: true }))
    const first = await startWarren('sqlite', { dataDir })
    await first.close()
    // As an earlier version left it.
    const loose = [dataDir, path.join(dataDir, 'artifacts'), path.join(dataDir, 'warren.db')]
    fs.writeFileSync(path.join(dataDir, 'encryption.key'), 'k'.repeat(44) + '\n', { mode: 0o644 })
    loose.push(path.join(dataDir, 'encryption.key'))
    for (const p of loose) fs.chmodSync(p, fs.statSync(p).isDirectory() ? 0o755 : 0o644)
    const lines: { msg?: string; paths?: string[] }[] = []
    const w = await startWarren('sqlite', { dataDir, logger: capture(lines) })
    try {
        assert.equal(octal(modeOf(dataDir)), '0700')
      assert.equal(octal(modeOf(path.join(dataDir, 'artifacts'))), '0700')
      for (const name of ['warren.db', 'warren.db-wal', 'warren.db-shm', 'encryption.key']) assert.equal(octal(modeOf(path.join(dataDir, name))), '0600', name)
      const said = lines.find((l) => /data folder was open to other users/.test(l.msg ?? ''))
      assert.ok(said, `no line says the folder was tightened: ${JSON.stringify(lines.map((l) => l.msg))}`)
      assert.deepEqual([...said.paths!].sort(), [...loose].sort())
    } finally {
      await w.close()
    }

    // Once private, a start says nothing of it.
    const again: { msg?: string }[] = []
    const w2 = await startWarren('sqlite', { dataDir, logger: capture(again) })
    t.after(() => w2.close())
    assert.equal(again.filter((l) => /data folder was open/.test(l.msg ?? '')).length, 0)
  })

  it("keeps the node's secret sealed with the deployment's key: the stored text is nothing a node accepts, what it seals is", async (t) => {
    const w = await startWarren('sqlite')
    t.after(() => w.close())
    const row = await w.store.db.selectFrom('nodes').select('secret').where('id', '=', w.node.id).executeTakeFirstOrThrow()
    assert.ok(row.secret, 'the node wrote no secret')
    assert.equal(w.node.passedOn({ [NODE_HEADER]: row.secret }), false, 'the stored text passes for the secret')
    // What a peer holding the key opens is what the node accepts: passing requests on still works.
    assert.equal(w.node.passedOn({ [NODE_HEADER]: w.box.open(row.secret) }), true)
  })
})
