// A graceful stop of `warren serve` (SIGTERM) with a large workspace up, the way a deployment stops
// it: the process ends on its own, leaves nothing of its prefix on the host, and loses nothing the
// next start needs (a turn's publication the stop cut short is finished by the next start; on
// PostgreSQL the workspace's snapshot, which another node would restore, is saved). The time it
// took is printed, never asserted (bench/stop measures it).
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import type { DialectName } from '../src/db/database.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { forEachDialect, PG_URL } from './harness.ts'
import { waitFor } from './fixtures.ts'
import { leftOnHost, removeDataDir } from './left-on-host.ts'
import { serviceProcess } from './service-process.ts'

const FILES = 20_000

forEachDialect('a graceful stop with a large workspace (child process)', (dialect: DialectName) => {
  const prefix = 'q' + Array.from(randomBytes(4), (b) => 'abcdefghijklmnopqrstuvwxyz0123456789'[b % 36]).join('')
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-stop-'))
  const schema = `stop_${randomBytes(6).toString('hex')}`
  const env: Record<string, string> = { WARREN_DATA_DIR: dataDir, WARREN_SANDBOX_PREFIX: prefix, WARREN_LOG_LEVEL: 'warn', WARREN_RATE_GENERAL_PER_MIN: '100000' }
  if (dialect === 'postgres') {
    env.DATABASE_URL = `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}options=${encodeURIComponent(`-c search_path=${schema}`)}`
    env.WARREN_ENCRYPTION_KEY = randomBytes(32).toString('hex')
  }
  const service = serviceProcess(env)
  const admin = dialect === 'postgres' ? new pg.Client({ connectionString: PG_URL }) : null
  let fake: FakeModelServer

  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    if (admin) {
      await admin.connect()
      await admin.query(`CREATE SCHEMA "${schema}"`)
    }
    service.token = await service.mint('stop-test')
  })

  after(async () => {
    try {
      // Whatever a failed test left goes with a start and a stop on the same prefix.
      if (!service.running && leftOnHost(prefix).length > 0) await service.start().catch(() => {})
      if (service.running) await service.stop('SIGTERM').catch(() => {})
    } finally {
      if (service.running) await service.stop('SIGKILL').catch(() => {})
      await fake.close()
      if (admin) {
        await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {})
        await admin.end()
      }
      removeDataDir(dataDir)
    }
  })

  it('ends on its own, leaves no namespace, cgroup or nftables table of its prefix, and the next start publishes what it cut short', { timeout: 600_000 }, async () => {
    await service.start()
    const mc = await service.api('POST', '/v1/model-credentials', { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] })
    assert.equal(mc.status, 201, mc.text)
    const created = await service.api('POST', '/v1/sessions', {})
    assert.equal(created.status, 201, created.text)
    const id = created.body.id as string
    fake.script({ toolCalls: [{ name: 'bash', args: { command: `mkdir -p tree && cd tree && seq 1 ${FILES} | xargs -n 1000 touch && echo made` } }] }, { text: 'Done.' })
    const sent = await service.api('POST', `/v1/sessions/${id}/messages`, { text: 'make the files' })
    assert.equal(sent.status, 202, sent.text)
    const turnId = sent.body.id as string
    // A poll the service's keep-alive cut short is asked again.
    const turn = () => service.api('GET', `/v1/sessions/${id}/turns/${turnId}`).then((r) => r.body, () => null)
    const completed = await waitFor('the turn to complete', async () => {
      const t = await turn()
      return t?.status === 'completed' ? t : null
    }, 300_000)
    assert.notEqual(leftOnHost(prefix).length, 0, 'control: a live workspace has a cgroup (and a namespace) of the prefix')

    // Stopped while the turn's files are being published (20,000 of them take a while).
    const t = performance.now()
    const exit = await service.stop('SIGTERM', 120_000)
    console.log(`# stop with ${FILES} files in the workspace: ${(performance.now() - t).toFixed(0)} ms`)
    assert.deepEqual(exit, { code: 0, signal: null }, `the service ended on its own:\n${service.output.join('\n')}`)
    assert.deepEqual(leftOnHost(prefix), [], 'nothing of the prefix is left on the host')
    if (admin) {
      // What another node would restore: a snapshot taken after the turn made its files (stored
      // before the turn settled, so the stop had nothing newer to save).
      const snap = await admin.query(`SELECT taken_at FROM "${schema}".workspace_snapshots WHERE session_id = $1`, [id])
      const made = await admin.query(`SELECT created_at FROM "${schema}".events WHERE session_id = $1 AND type = 'agent.tool_result'`, [id])
      assert.equal(snap.rows.length, 1, 'the stop leaves the workspace saved')
      assert.equal(made.rows.length, 1, 'control: one command made the files')
      assert.ok(Number(snap.rows[0].taken_at) >= Number(made.rows[0].created_at), 'taken after the turn made its files')
      assert.ok(Number(snap.rows[0].taken_at) <= Number(completed.completed_at), 'stored before the turn was reported completed')
    }

    // Nothing lost: the next start publishes every file the turn made.
    await service.start()
    const published = await waitFor('the publication', async () => {
      const t = await turn()
      return t && t.artifacts !== 'pending' ? t : null
    }, 300_000)
    assert.equal(published.artifacts, 'ready')
    const paths = new Set<string>()
    for (let after = ''; ; ) {
      const page = await service.api('GET', `/v1/sessions/${id}/artifacts?limit=100&order=asc&turn_id=${turnId}${after ? `&after=${after}` : ''}`)
      assert.equal(page.status, 200, page.text)
      for (const a of page.body.data as { id: string; path: string }[]) paths.add(a.path)
      if (!page.body.has_more) break
      after = page.body.data.at(-1).id
    }
    assert.equal(paths.size, FILES)
    assert.ok(paths.has(`tree/${FILES}`), 'the last file made is published')
    await service.stop('SIGTERM', 120_000)
    assert.deepEqual(leftOnHost(prefix), [])
  })
})
