// A workspace's disk quota through HTTP: a command writing past it gets ENOSPC in its output and
// the turn goes on, an upload past it is refused with a clear 400, and the session keeps working.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { errorOf, forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, newOrg } from './turns.helpers.ts'

const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64')

forEachDialect('workspace disk quota', (dialect) => {
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_WORKSPACE_DISK_MB: '16' } })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  it('a command past the quota gets "No space left on device", an upload past it a 400; room made, both work again', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'head -c 32M /dev/zero > big.bin' } }] }, { text: 'Done.' })
    const filled = await c.settled(sid, (await c.accept(sid, 'fill it')).id)
    assert.equal(filled.status, 'completed')
    const result = fake.modelRequests.at(-1)!.toolResults.at(-1)!
    assert.match(result.content, /No space left on device/)

    const upload = await c.call('POST', `/v1/sessions/${sid}/files`, { files: [{ path: 'more.bin', content: b64(Buffer.alloc(4 * 1024 * 1024)) }] })
    assert.equal(upload.statusCode, 400, upload.body)
    assert.match(errorOf(upload).message, /no room left in the workspace \(its disk quota is full\)/)

    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'rm big.bin && echo fits > small.txt && cat small.txt' } }] }, { text: 'Done.' })
    await c.settled(sid, (await c.accept(sid, 'make room')).id)
    assert.match(fake.modelRequests.at(-1)!.toolResults.at(-1)!.content, /fits/)
    const again = await c.call('POST', `/v1/sessions/${sid}/files`, { files: [{ path: 'more.bin', content: b64(Buffer.alloc(4 * 1024 * 1024)) }] })
    assert.equal(again.statusCode, 200, again.body)
  })
})
