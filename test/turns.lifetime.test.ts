import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { NO_RATE_LIMITS, client, details, newOrg } from './turns.helpers.ts'
import { hostWorkspace } from './host-workspace.ts'

forEachDialect('turns: the workspace lifetime ceiling', (dialect) => {
  // A short lifetime and no idle pause: the ceiling arrives while a tool runs (a minute's sleep).
  // Short, but not so short that the restored workspace's own lifetime runs out during the second
  // turn on a busy machine (a restore from PostgreSQL, two model calls and a command).
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_WORKSPACE_LIFETIME_MS: '6000', WARREN_IDLE_PAUSE_MS: '600000' } })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer()
  })
  after(() => fake.close())

  it('fails a turn still running when its workspace is reclaimed; the next turn runs on the restored workspace', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'anthropic')
    const sid = await c.session()
    await waitFor('the workspace', async () => details(await c.items(sid), 'sandbox.created').length > 0)
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'echo kept > kept.txt; sleep 60; echo late > late.txt' } }] })
    const first = await c.accept(sid, 'run the long job')
    const failed = await c.settled(sid, first.id)
    assert.equal(failed.status, 'failed')
    assert.equal(failed.error?.code, 'sandbox_error')
    assert.match(failed.error!.message, /lifetime ceiling/)
    const items = await c.items(sid)
    const result = details(items, 'agent.tool_result')
    assert.equal(result.length, 1)
    assert.equal(result[0]!.cancelled, true, 'the command was cut, not left running')
    assert.equal((await c.getSession(sid)).status, 'failed')

    // The next input restores the workspace from its kept files.
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'cat kept.txt; ls late.txt 2>&1 || true' } }] }, { text: 'the file is still there' })
    const second = await c.accept(sid, 'is the file still there?')
    const done = await c.settled(sid, second.id)
    assert.equal(done.status, 'completed', JSON.stringify(done.error))
    const toolOutput = fake.modelRequests.at(-1)!.toolResults.at(-1)!.content
    assert.match(toolOutput, /^kept$/m, 'files written before the reclaim survive it')
    assert.match(toolOutput, /No such file/, 'the cut command never finished')
    assert.equal(fs.existsSync(path.join(hostWorkspace(w(), sid), 'late.txt')), false)
    assert.equal((await c.getSession(sid)).status, 'idle')
  })
})
