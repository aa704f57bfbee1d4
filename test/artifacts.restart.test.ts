// Publication needs no live sandbox: a turn whose publication a stop interrupted is published at
// the next start, before any workspace is up, by reading its workspace through the provider.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomText } from '../src/shared/ids.ts'
import { forEachDialect, startWarren } from './harness.ts'
import { removeSharedStore } from './restart-store.ts'
import { startModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, newOrg } from './turns.helpers.ts'

forEachDialect('artifacts across a restart', (dialect) => {
  it('publishes at start what a stop left pending, from the kept workspace, without bringing a sandbox up', async () => {
    const fake = await startModelServer({ models: ['m1'] })
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-publish-restart-'))
    const pgSchema = `t_${randomText(12)}`
    const opts = { dataDir, sandboxPrefix: `p${randomText(4)}`, pgSchema, env: NO_RATE_LIMITS }
    const first = await startWarren(dialect, opts)
    let second: Awaited<ReturnType<typeof startWarren>> | null = null
    try {
      const org = await newOrg(first)
      const c = client(first, org)
      await c.connect(fake, 'openai')
      const sid = await c.session()
      fake.script({ toolCalls: [{ name: 'bash', args: { command: 'mkdir -p out && printf "left behind\\n" > out/late.txt' } }] }, { text: 'Done.' })
      const turn = await c.accept(sid, 'make a file')
      assert.equal((await c.settled(sid, turn.id, 60_000)).artifacts, 'ready')
      // As if the service had stopped while publishing: the turn's publication never happened.
      await first.store.db.deleteFrom('artifacts').where('turn_id', '=', turn.id).execute()
      await first.store.db.updateTable('turns').set({ artifacts: 'pending', artifacts_skipped: '[]' }).where('id', '=', turn.id).execute()
      await first.close()

      second = await startWarren(dialect, opts)
      const c2 = client(second, org)
      const t = await c2.turn(sid, turn.id)
      assert.equal(t.artifacts, 'ready')
      const list = (await c2.call('GET', `/v1/sessions/${sid}/artifacts?order=asc&limit=100`)).json().data as { path: string; sha256: string }[]
      assert.deepEqual(list.map((a) => [a.path, a.sha256]), [['out/late.txt', createHash('sha256').update('left behind\n').digest('hex')]])
      // Published from the kept files alone: the workspace was not brought back for it.
      const row = await second.store.db.selectFrom('sessions').select('environment').where('id', '=', sid).executeTakeFirstOrThrow()
      assert.equal(JSON.parse(row.environment).state, 'reclaimed')
    } finally {
      await second?.close()
      await fake.close()
      await removeSharedStore(dialect, dataDir, pgSchema)
    }
  })
})
