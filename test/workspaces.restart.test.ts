import { it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomText } from '../src/shared/ids.ts'
import { forEachDialect, startWarren } from './harness.ts'
import { removeSharedStore } from './restart-store.ts'
import { connectModel, hasEvent, waitFor } from './fixtures.ts'
import { hostWorkspace } from './host-workspace.ts'

const b64 = (s: string) => Buffer.from(s).toString('base64')

forEachDialect('workspaces across a crash of the service', (dialect) => {
  it('cleans the crashed run’s sandboxes at start, marks its open interval for review, and restores on the next input', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-restart-'))
    const sandboxPrefix = `r${randomText(4)}`
    const pgSchema = `t_${randomText(12)}`
    const opts = { dataDir, sandboxPrefix, pgSchema, env: { WARREN_IDLE_PAUSE_MS: '600000' } }
    // No delivery worker in the run that crashes: nothing of it may go on once its store is gone.
    const first = await startWarren(dialect, { ...opts, deliveries: false })
    await connectModel(first)
    const created = await first.inject({ method: 'POST', url: '/v1/sessions', payload: { environment: { files: [{ path: 'kept.txt', content: b64('kept') }] } } })
    const id = created.json().id as string
    await hasEvent(first, id, 'sandbox.created')
    const dir = hostWorkspace(first, id)
    await waitFor('seed file', async () => fs.existsSync(path.join(dir, 'kept.txt')))
    const cgroupsBefore = execFileSync('sh', ['-c', `find /sys/fs/cgroup -maxdepth 3 -type d -name 'warren-${sandboxPrefix}-*' ! -name '*~warm-*' | wc -l`]).toString().trim()
    assert.notEqual(cgroupsBefore, '0', 'control: the crashed run leaves cgroups behind')
    const netnsOf = () => execFileSync('ip', ['netns', 'list']).toString().split('\n').map((l) => l.split(' ')[0]!).filter((n) => n.startsWith(`${sandboxPrefix}-`))
    const namespacesBefore = netnsOf()
    assert.notEqual(namespacesBefore.length, 0, 'control: the crashed run leaves network namespaces behind')

    // The crash: the store goes away under the running service and nothing of it stops in order
    // (app.close() is a graceful stop: it would close the workspaces and their usage intervals).
    await first.store.close()

    const second = await startWarren(dialect, opts)
    try {
      const cgroupsAfter = execFileSync('sh', ['-c', `find /sys/fs/cgroup -maxdepth 3 -type d -name 'warren-${sandboxPrefix}-*' ! -name '*~warm-*' | wc -l`]).toString().trim()
      assert.equal(cgroupsAfter, '0', 'orphaned cgroups (and their processes) are gone')
      // Compared with the list taken before the crash: the crashed run's provider object still lives
      // in this test process (a real crash would have ended it) and may keep refilling its pool.
      const namespacesAfter = netnsOf()
      assert.deepEqual(namespacesBefore.filter((n) => namespacesAfter.includes(n)), [], 'orphaned network namespaces are gone')
      const rows = await second.store.db.selectFrom('usage_intervals').selectAll().where('session_id', '=', id).execute()
      assert.equal(rows.length, 1)
      assert.equal(rows[0]!.needs_review, 1, 'an interval whose end was lost is marked for review')
      const state = await second.store.db.selectFrom('sessions').select('environment').where('id', '=', id).executeTakeFirstOrThrow()
      assert.equal(JSON.parse(state.environment).state, 'reclaimed')

      // The first run's token still works against the same store.
      const up = await second.app.inject({ method: 'POST', url: `/v1/sessions/${id}/files`, headers: { authorization: `Bearer ${first.token}` }, payload: { files: [{ path: 'after.txt', content: b64('x') }] } })
      assert.equal(up.statusCode, 200, up.body)
      assert.equal(fs.readFileSync(path.join(dir, 'kept.txt'), 'utf8'), 'kept')
      const usage = await second.app.inject({ method: 'GET', url: `/v1/sessions/${id}/usage`, headers: { authorization: `Bearer ${first.token}` } })
      assert.equal(usage.json().needs_review_intervals, 1)
      assert.equal(usage.json().intervals, 2)
    } finally {
      // The crashed run's provider object still lives in this test process: let it go.
      await first.runner.close().catch(() => {})
      await first.workspaces.close().catch(() => {})
      await first.bus.close()
      await second.close()
      await removeSharedStore(dialect, dataDir, pgSchema)
    }
  })
})
