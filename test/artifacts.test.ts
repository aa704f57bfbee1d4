// Artifacts through HTTP: what a turn leaves is published when it settles (real sandbox, the
// agent's own bash), listed, served byte for byte, and kept after the workspace loses it.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import os from 'node:os'
import path from 'node:path'
import { pickBlobStore } from '../src/artifacts/database-blob-store.ts'
import { RECORD_BATCH } from '../src/artifacts/publish-turn.ts'
import { errorOf, forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, details, newOrg, type TurnJson } from './turns.helpers.ts'

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex')

forEachDialect('artifacts', (dialect) => {
  const w = useWarren(dialect, { env: NO_RATE_LIMITS })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())


  /** Runs one turn whose agent makes these tool calls, one step each, and returns it once published. */
  const runTools = async (c: ReturnType<typeof client>, sid: string, ...calls: { name: string; args: unknown }[]): Promise<TurnJson> => {
    fake.script(...calls.map((call) => ({ toolCalls: [call] })), { text: 'Done.' })
    const turn = await c.accept(sid, 'make files')
    return c.settled(sid, turn.id, 60_000)
  }
  const runBash = (c: ReturnType<typeof client>, sid: string, command: string) => runTools(c, sid, { name: 'bash', args: { command } })

  it('publishes the regular files a turn created or modified, byte for byte; never links, .git, node_modules or deleted files', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session()
    const turn = await runBash(
      c,
      sid,
      [
        'mkdir -p out .git node_modules/x',
        'printf "hello artifacts\\n" > out/hello.txt',
        'head -c 70000 /dev/urandom > out/noise.bin',
        'echo "{}" > data.json',
        'ln -s /etc/passwd out/passwd-link',
        'echo ref > .git/HEAD',
        'echo module > node_modules/x/index.js',
        'echo gone > temp.txt && rm temp.txt',
      ].join(' && '),
    )
    assert.equal(turn.status, 'completed')
    assert.equal(turn.artifacts, 'ready')
    assert.deepEqual(turn.artifacts_skipped, [])

    const list = await c.call('GET', `/v1/sessions/${sid}/artifacts?order=asc&limit=100`)
    assert.equal(list.statusCode, 200, list.body)
    const arts = list.json().data as { id: string; path: string; size_bytes: number; sha256: string; content_type: string; turn_id: string; session_id: string; object: string; created_at: number }[]
    assert.deepEqual(arts.map((a) => a.path).sort(), ['data.json', 'out/hello.txt', 'out/noise.bin'])
    const byPath = new Map(arts.map((a) => [a.path, a]))
    const hello = byPath.get('out/hello.txt')!
    assert.deepEqual(Object.keys(hello).sort(), ['content_type', 'created_at', 'id', 'object', 'path', 'session_id', 'sha256', 'size_bytes', 'turn_id'])
    assert.equal(hello.object, 'artifact')
    assert.match(hello.id, /^art_/)
    assert.equal(hello.session_id, sid)
    assert.equal(hello.turn_id, turn.id)
    assert.equal(hello.size_bytes, 16)
    assert.equal(hello.sha256, sha('hello artifacts\n'))
    assert.equal(hello.content_type, 'text/plain')
    assert.equal(byPath.get('data.json')!.content_type, 'application/json')
    assert.equal(byPath.get('out/noise.bin')!.content_type, 'application/octet-stream')

    // The bytes, as published.
    for (const a of arts) {
      const res = await c.call('GET', `/v1/sessions/${sid}/artifacts/${a.id}/content`)
      assert.equal(res.statusCode, 200)
      assert.equal(res.headers['content-type'], 'application/octet-stream')
      assert.equal(res.rawPayload.length, a.size_bytes)
      assert.equal(sha(res.rawPayload), a.sha256, a.path)
    }
    // One artifact.created per file, in the durable record, naming the artifact.
    const created = details(await c.items(sid), 'artifact.created')
    assert.deepEqual(
      created.map((d) => [d.id, d.path, d.size_bytes, d.turn_id]).sort(),
      arts.map((a) => [a.id, a.path, a.size_bytes, turn.id]).sort(),
    )
    // turn_id narrows the list; another turn's id gives nothing.
    const narrowed = await c.call('GET', `/v1/sessions/${sid}/artifacts?turn_id=${turn.id}`)
    assert.equal(narrowed.json().data.length, 3)
    assert.equal((await c.call('GET', `/v1/sessions/${sid}/artifacts?turn_id=trn_other`)).json().data.length, 0)

    // The archive of the turn: a POSIX tar whose entries are named as in the workspace.
    const tarOf = async (url: string) => {
      const res = await c.call('GET', url)
      assert.equal(res.statusCode, 200, res.body)
      assert.equal(res.headers['content-type'], 'application/x-tar')
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-archive-'))
      fs.writeFileSync(path.join(dir, 'a.tar'), res.rawPayload)
      const names = execFileSync('tar', ['-tf', 'a.tar'], { cwd: dir }).toString().trim().split('\n').sort()
      execFileSync('mkdir', ['x'], { cwd: dir })
      execFileSync('tar', ['-xf', '../a.tar'], { cwd: path.join(dir, 'x') })
      return { names, read: (name: string) => fs.readFileSync(path.join(dir, 'x', name)), done: () => fs.rmSync(dir, { recursive: true, force: true }) }
    }
    const one = await tarOf(`/v1/sessions/${sid}/artifacts/archive?turn_id=${turn.id}`)
    assert.deepEqual(one.names, ['data.json', 'out/hello.txt', 'out/noise.bin'])
    for (const a of arts) assert.equal(sha(one.read(a.path)), a.sha256, a.path)
    one.done()
    const unknownTurn = await c.call('GET', `/v1/sessions/${sid}/artifacts/archive?turn_id=trn_nope`)
    assert.equal(unknownTurn.statusCode, 404)

    // Published copies survive the workspace losing the files, and a later turn publishes only what it changed.
    const second = await runBash(c, sid, 'rm -rf out && echo again > data.json')
    assert.equal(second.artifacts, 'ready')
    const res = await c.call('GET', `/v1/sessions/${sid}/artifacts/${hello.id}/content`)
    assert.equal(res.statusCode, 200)
    assert.equal(res.body, 'hello artifacts\n')
    const secondList = (await c.call('GET', `/v1/sessions/${sid}/artifacts?turn_id=${second.id}`)).json().data
    assert.deepEqual(secondList.map((a: { path: string }) => a.path), ['data.json'])
    assert.equal(secondList[0].sha256, sha('again\n'))

    // The whole session: every artifact under its turn's id. A stored copy that is gone is left
    // out of the archive, and its bytes are a 404.
    const all = await tarOf(`/v1/sessions/${sid}/artifacts/archive`)
    assert.deepEqual(all.names, [`${second.id}/data.json`, `${turn.id}/data.json`, `${turn.id}/out/hello.txt`, `${turn.id}/out/noise.bin`].sort())
    assert.equal(all.read(`${second.id}/data.json`).toString(), 'again\n')
    all.done()
    const noise = byPath.get('out/noise.bin')!
    // Where the copy lives: a local file on SQLite; rows every node reads on PostgreSQL.
    const localCopy = path.join(w().dataDir, 'artifacts', noise.sha256.slice(0, 2), noise.sha256)
    assert.equal(fs.existsSync(localCopy), w().dialect === 'sqlite')
    await pickBlobStore(w().store, w().dataDir, 'artifacts').delete(noise.sha256)
    const without = await tarOf(`/v1/sessions/${sid}/artifacts/archive?turn_id=${turn.id}`)
    assert.deepEqual(without.names, ['data.json', 'out/hello.txt'])
    without.done()
    const gone = await c.call('GET', `/v1/sessions/${sid}/artifacts/${noise.id}/content`)
    assert.equal(gone.statusCode, 404)
    assert.match(errorOf(gone).message, /stored copy/)
  })

  it('publishes what a turn left when it settled, not what the next queued turn wrote; never what a later call deleted or .git and node_modules', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    fake.script(
      { toolCalls: [{ name: 'write_file', args: { path: 'report.md', content: 'v1 from turn 1\n' } }] },
      { toolCalls: [{ name: 'write_file', args: { path: '.git/config', content: 'x' } }] },
      { toolCalls: [{ name: 'write_file', args: { path: 'node_modules/m/index.js', content: 'x' } }] },
      { toolCalls: [{ name: 'bash', args: { command: 'echo temporary > scratch.txt' } }] },
      { toolCalls: [{ name: 'bash', args: { command: 'rm scratch.txt; sleep 0.3' } }] },
      { text: 'Turn 1 done.' },
      { toolCalls: [{ name: 'write_file', args: { path: 'report.md', content: 'v2 from turn 2\n' } }] },
      { text: 'Turn 2 done.' },
    )
    const first = await c.accept(sid, 'first')
    const second = await c.accept(sid, 'second (queued)')
    const one = await c.settled(sid, first.id, 60_000)
    const two = await c.settled(sid, second.id, 60_000)
    assert.equal(one.artifacts, 'ready')
    assert.equal(two.artifacts, 'ready')
    const list = async (turnId: string) => (await c.call('GET', `/v1/sessions/${sid}/artifacts?turn_id=${turnId}`)).json().data as { id: string; path: string }[]
    const firstArts = await list(first.id)
    assert.deepEqual(firstArts.map((a) => a.path), ['report.md'])
    assert.equal((await c.call('GET', `/v1/sessions/${sid}/artifacts/${firstArts[0]!.id}/content`)).body, 'v1 from turn 1\n')
    const secondArts = await list(second.id)
    assert.equal((await c.call('GET', `/v1/sessions/${sid}/artifacts/${secondArts[0]!.id}/content`)).body, 'v2 from turn 2\n')
  })

  it('records a large publication a batch at a time: requests are answered while it runs, and each path is published once', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    const n = RECORD_BATCH * 3 + 7
    fake.script({ toolCalls: [{ name: 'bash', args: { command: `mkdir -p many && for i in $(seq ${n}); do echo $i > many/$i.txt; done` } }] }, { text: 'Done.' })
    const accepted = await c.accept(sid, 'make files')
    // The list, then the turn, again and again. Recorded in the one transaction that ends the
    // publication, files listed would always come with a turn no longer pending.
    let between = 0
    for (;;) {
      const listed = (await c.call('GET', `/v1/sessions/${sid}/artifacts?limit=1`)).json().data.length
      const t = await c.turn(sid, accepted.id)
      if (t.status !== 'working' && t.artifacts !== 'pending') break
      if (listed > 0 && t.artifacts === 'pending') between++
      // An injected request never waits on I/O: without a pause the loop would starve the turn
      // (asked back to back: 3,500 rounds and 22 s on a loaded machine; with the pause, 6 to 12 s).
      await sleep(5)
    }
    assert.ok(between > 0, 'answered between two batches of the publication')
    const turn = await c.settled(sid, accepted.id)
    assert.equal(turn.artifacts, 'ready')
    const paths: string[] = []
    for (let after = ''; ; ) {
      const page = (await c.call('GET', `/v1/sessions/${sid}/artifacts?order=asc&limit=100${after ? `&after=${after}` : ''}`)).json()
      paths.push(...(page.data as { path: string }[]).map((a) => a.path))
      if (!page.has_more) break
      after = page.data.at(-1).id
    }
    assert.equal(paths.length, n)
    assert.equal(new Set(paths).size, n)
    const created = details(await c.items(sid), 'artifact.created')
    assert.equal(created.length, n, 'one artifact.created a file')
  })

  it('refuses what is not there: another organization, an unknown artifact, an unknown query field', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session()
    await runTools(c, sid, { name: 'write_file', args: { path: 'mine.txt', content: 'private' } })
    const [mine] = (await c.call('GET', `/v1/sessions/${sid}/artifacts`)).json().data as { id: string }[]
    const other = client(w(), await newOrg(w()))
    assert.equal((await other.call('GET', `/v1/sessions/${sid}/artifacts`)).statusCode, 404)
    assert.equal((await other.call('GET', `/v1/sessions/${sid}/artifacts/${mine!.id}/content`)).statusCode, 404)
    assert.equal((await other.call('GET', `/v1/sessions/${sid}/artifacts/archive`)).statusCode, 404)
    // The other organization's own session does not lend its path to this artifact either.
    const theirs = await other.connect(fake, 'openai').then(() => other.session())
    assert.equal((await other.call('GET', `/v1/sessions/${theirs}/artifacts/${mine!.id}/content`)).statusCode, 404)
    const missing = await c.call('GET', `/v1/sessions/${sid}/artifacts/art_nope/content`)
    assert.equal(missing.statusCode, 404)
    assert.equal(errorOf(missing).code, 'not_found')
    assert.equal((await c.call('GET', `/v1/sessions/${sid}/artifacts?nope=1`)).statusCode, 400)
  })
})

forEachDialect('artifacts over their ceilings', (dialect) => {
  // The ceilings narrowed to KiB, so that the rule is tested without writing hundreds of MiB.
  const w = useWarren(dialect, { env: NO_RATE_LIMITS, artifactLimits: { fileBytes: 64 * 1024, turnBytes: 160 * 1024 } })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  it('skips files over the ceilings with a reason naming it, and the turn still succeeds (partial)', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    // 100 KiB is over the one-file ceiling; three of 60 KiB pass it one by one but not together.
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'head -c 102400 /dev/urandom > huge.bin && for f in a b c; do head -c 61440 /dev/urandom > $f.bin; done && echo small > small.txt' } }] }, { text: 'Done.' })
    const accepted = await c.accept(sid, 'make files')
    const turn = await c.settled(sid, accepted.id)
    assert.equal(turn.status, 'completed')
    assert.equal(turn.artifacts, 'partial')
    const skipped = new Map((turn.artifacts_skipped as { path: string; reason: string }[]).map((s) => [s.path, s.reason]))
    assert.equal(skipped.size, 2, JSON.stringify(turn.artifacts_skipped))
    assert.match(skipped.get('huge.bin') ?? '', /^102400 bytes is over the 65536 bytes ceiling for one artifact$/)
    const turnCeiling = [...skipped].find(([p]) => p !== 'huge.bin')!
    assert.match(turnCeiling[1], /over the 163840 bytes ceiling for one turn's artifacts/)
    const arts = (await c.call('GET', `/v1/sessions/${sid}/artifacts?limit=100`)).json().data as { path: string; size_bytes: number }[]
    assert.deepEqual(arts.map((a) => a.path).sort(), ['a.bin', 'b.bin', 'c.bin', 'small.txt'].filter((p) => p !== turnCeiling[0]).sort())
    assert.ok(arts.reduce((n, a) => n + a.size_bytes, 0) <= 160 * 1024)
  })
})

forEachDialect('artifacts over the organization ceiling', (dialect) => {
  // 150 KiB for the organization's stored artifacts: two turns of 60 KiB fit, the third does not.
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_ARTIFACT_TURN_MB: '1' }, config: { artifactOrgBytes: 150 * 1024 } })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  const turnWriting = async (c: ReturnType<typeof client>, sid: string, file: string) => {
    fake.script({ toolCalls: [{ name: 'bash', args: { command: `head -c 61440 /dev/urandom > ${file}` } }] }, { text: 'Done.' })
    return c.settled(sid, (await c.accept(sid, 'make a file')).id)
  }

  it('skips what would take an organization past its stored-artifact ceiling, across its sessions; another organization is not held back', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const [s1, s2] = [await c.session(), await c.session()]
    assert.equal((await turnWriting(c, s1, 'one.bin')).artifacts, 'ready')
    assert.equal((await turnWriting(c, s2, 'two.bin')).artifacts, 'ready')
    const third = await turnWriting(c, s1, 'three.bin')
    assert.equal(third.status, 'completed')
    assert.equal(third.artifacts, 'partial')
    assert.deepEqual(third.artifacts_skipped, [{ path: 'three.bin', reason: "over the organization's 153600 bytes ceiling for stored artifacts (122880 bytes stored)" }])
    assert.deepEqual(((await c.call('GET', `/v1/sessions/${s1}/artifacts`)).json().data as { path: string }[]).map((a) => a.path), ['one.bin'])

    const other = client(w(), await newOrg(w()))
    await other.connect(fake, 'openai')
    assert.equal((await turnWriting(other, await other.session(), 'mine.bin')).artifacts, 'ready')
  })

  it('gives back what a deleted session kept: the organization total falls at the deletion', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const [s1, s2] = [await c.session(), await c.session()]
    assert.equal((await turnWriting(c, s1, 'one.bin')).artifacts, 'ready')
    assert.equal((await turnWriting(c, s2, 'two.bin')).artifacts, 'ready')
    assert.equal((await turnWriting(c, s1, 'full.bin')).artifacts, 'partial', 'the ceiling is reached')
    assert.equal((await c.call('DELETE', `/v1/sessions/${s2}`)).statusCode, 200)
    const after = await turnWriting(c, s1, 'three.bin')
    assert.equal(after.artifacts, 'ready', JSON.stringify(after.artifacts_skipped))
    assert.deepEqual(((await c.call('GET', `/v1/sessions/${s1}/artifacts`)).json().data as { path: string }[]).map((a) => a.path).sort(), ['one.bin', 'three.bin'])
    // Stored now: one.bin and three.bin; a third file is over again, counted without the deleted session's.
    const over = await turnWriting(c, s1, 'four.bin')
    assert.deepEqual(over.artifacts_skipped, [{ path: 'four.bin', reason: "over the organization's 153600 bytes ceiling for stored artifacts (122880 bytes stored)" }])
  })

  it("releases a deleted session's artifact bytes, but never bytes another session's artifact names", async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const [s1, s2] = [await c.session(), await c.session()]
    const same = 'yes shared | head -c 20000 > same.txt'
    for (const [sid, command] of [[s1, `${same} && head -c 20000 /dev/urandom > own.bin`], [s2, same]] as const) {
      fake.script({ toolCalls: [{ name: 'bash', args: { command } }] }, { text: 'Done.' })
      assert.equal((await c.settled(sid, (await c.accept(sid, 'make files')).id)).artifacts, 'ready')
    }
    const list = async (sid: string) => (await c.call('GET', `/v1/sessions/${sid}/artifacts`)).json().data as { id: string; path: string; sha256: string }[]
    // Blobs are content-addressed: an artifact's key is its sha256.
    const first = await list(s1)
    const [ownKey, sharedKey] = ['own.bin', 'same.txt'].map((p) => first.find((a) => a.path === p)!.sha256) as [string, string]
    const blobs = pickBlobStore(w().store, w().dataDir, 'artifacts')
    assert.ok((await blobs.exists(ownKey)) && (await blobs.exists(sharedKey)), 'control: both stored')

    assert.equal((await c.call('DELETE', `/v1/sessions/${s1}`)).statusCode, 200)
    assert.equal(await blobs.exists(ownKey), false, 'the deleted session alone named it: released')
    assert.equal(await blobs.exists(sharedKey), true, 'the other session names it: kept')
    const kept = (await list(s2)).find((a) => a.path === 'same.txt')!
    const content = await c.call('GET', `/v1/sessions/${s2}/artifacts/${kept.id}/content`)
    assert.equal(content.statusCode, 200)
    assert.equal(content.body, 'shared\n'.repeat(20000).slice(0, 20000))

    assert.equal((await c.call('DELETE', `/v1/sessions/${s2}`)).statusCode, 200)
    assert.equal(await blobs.exists(sharedKey), false, 'named by no artifact any more: released')

    // The same bytes published again are stored again, whole.
    const s3 = await c.session()
    fake.script({ toolCalls: [{ name: 'bash', args: { command: same } }] }, { text: 'Done.' })
    assert.equal((await c.settled(s3, (await c.accept(s3, 'make files')).id)).artifacts, 'ready')
    const again = (await list(s3)).find((a) => a.path === 'same.txt')!
    assert.equal((await c.call('GET', `/v1/sessions/${s3}/artifacts/${again.id}/content`)).body, 'shared\n'.repeat(20000).slice(0, 20000))
  })
})
