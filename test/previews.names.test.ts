// Preview names after withdrawal: a name taken down (by DELETE, by publishing under another name,
// or with its session) stays its organization's for WARREN_PREVIEW_NAME_HOLD_MS, so that another
// organization cannot pick up the links and the visitors the first one sent there.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { errorOf, forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, newOrg } from './turns.helpers.ts'

forEachDialect('preview names', (dialect) => {
  // The default hold (a day): nothing here waits for it to end.
  const w = useWarren(dialect, { env: NO_RATE_LIMITS })
  let fake: FakeModelServer
  let mine: ReturnType<typeof client>
  let theirs: ReturnType<typeof client>

  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    mine = client(w(), await newOrg(w()))
    theirs = client(w(), await newOrg(w()))
    await mine.connect(fake, 'openai')
    await theirs.connect(fake, 'openai')
  })
  after(() => fake.close())

  const publish = (c: ReturnType<typeof client>, sid: string, subdomain: string) => c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain, port: 3000 })
  const refusedTo = async (sid: string, subdomain: string) => {
    const res = await publish(theirs, sid, subdomain)
    assert.equal(res.statusCode, 409, res.body)
    const error = errorOf(res)
    assert.equal(error.code, 'conflict')
    assert.match(error.message, new RegExp(`"${subdomain}" was withdrawn .* held for the organization that published it until \\d{4}-\\d\\d-\\d\\dT`))
    assert.equal((await theirs.getSession(sid)).preview.published_url, null, 'nothing half done')
  }

  it('a name withdrawn by DELETE is refused to another organization at once, and its own may publish it again', async () => {
    const first = await mine.session()
    assert.equal((await publish(mine, first, 'held-name')).statusCode, 200)
    assert.equal((await mine.call('DELETE', `/v1/sessions/${first}/preview`)).statusCode, 200)
    const stranger = await theirs.session()
    await refusedTo(stranger, 'held-name')
    const second = await mine.session()
    const again = await publish(mine, second, 'held-name')
    assert.equal(again.statusCode, 200, again.body)
    assert.equal(again.json().subdomain, 'held-name')
  })

  it('a name left for another one, or gone with its session, is held the same way', async () => {
    const moving = await mine.session()
    assert.equal((await publish(mine, moving, 'old-name')).statusCode, 200)
    assert.equal((await publish(mine, moving, 'new-name')).statusCode, 200)
    const stranger = await theirs.session()
    await refusedTo(stranger, 'old-name')

    assert.equal((await mine.call('DELETE', `/v1/sessions/${moving}`)).statusCode, 200)
    await refusedTo(stranger, 'new-name')
    // The organization's own sessions take either name back.
    const other = await mine.session()
    assert.equal((await publish(mine, other, 'new-name')).statusCode, 200)
    assert.equal((await publish(mine, other, 'old-name')).statusCode, 200)
    // A name never published is anyone's.
    assert.equal((await publish(theirs, stranger, 'fresh-name')).statusCode, 200)
  })
})
