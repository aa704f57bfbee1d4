// environment.image on the service's side of the sandbox seam: the API takes a reference (the
// session's, its template's or the deployment's default), the workspace manager passes it to the
// provider, records the digest the first start resolved and pins it on every later start, shows
// the pull as it comes, and turns an image that cannot be had into workspace.recovery_failed. The
// image part of the provider is a fake (test/fakes/image-provider.ts); the sandbox is real.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { loadConfig } from '../src/config.ts'
import { errorOf, forEachDialect, startWarren, useWarren, type Warren } from './harness.ts'
import { connectModel, hasEvent, items, waitFor } from './fixtures.ts'
import { digestOf, IMAGE_KIND, imageFake } from './fakes/image-provider.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { client, newOrg } from './turns.helpers.ts'

const b64 = (s: string) => Buffer.from(s).toString('base64')
const REGISTRY = '127.0.0.1:5999'

async function create(w: Warren, environment: object = {}): Promise<{ id: string; environment: { state: string; image: unknown } }> {
  const res = await w.inject({ method: 'POST', url: '/v1/sessions', payload: { environment } })
  assert.equal(res.statusCode, 201, res.body)
  return res.json()
}
const read = async (w: Warren, id: string) => (await w.inject({ method: 'GET', url: `/v1/sessions/${id}` })).json()
const del = (w: Warren, id: string) => w.inject({ method: 'DELETE', url: `/v1/sessions/${id}` })

forEachDialect('environment images', (dialect) => {
  const fake = imageFake()
  // A short lifetime: a workspace is reclaimed soon after it comes up, and the next use restores it.
  const w = useWarren(dialect, {
    env: { WARREN_SANDBOX_PROVIDER: IMAGE_KIND, WARREN_WORKSPACE_LIFETIME_MS: '1500', WARREN_RATE_SESSIONS_PER_MIN: '1000', WARREN_RATE_GENERAL_PER_MIN: '100000' },
    providers: { [IMAGE_KIND]: fake.kind },
  })
  let model: FakeModelServer
  before(async () => {
    await connectModel(w())
    model = await startModelServer({ models: ['m1'] })
  })
  after(() => model.close())

  it('no image anywhere: the host system as before, environment.image null, the provider asked for none', async () => {
    const s = await create(w())
    assert.equal(s.environment.image, null)
    await hasEvent(w(), s.id, 'sandbox.created')
    assert.deepEqual(fake.creates.filter((c) => c.id === s.id), [{ id: s.id, image: undefined }])
    assert.equal((await read(w(), s.id)).environment.image, null)
    assert.equal((await items(w(), s.id)).some((i) => i.detail.event === 'sandbox.image_progress'), false)
    await del(w(), s.id)
  })

  it('shows {ref, digest: null}, is pending with progress items while the image comes, records the digest, and pins it on the restore', async () => {
    const ref = `${REGISTRY}/tools/go:1.22`
    const release = fake.hold(ref)
    const s = await create(w(), { image: ref })
    assert.deepEqual(s.environment.image, { ref, digest: null })
    // The first progress is recorded while create still waits on the rest of the image.
    await hasEvent(w(), s.id, 'sandbox.image_progress')
    const during = await read(w(), s.id)
    assert.equal(during.environment.state, 'pending')
    assert.deepEqual(during.environment.image, { ref, digest: null }, 'no digest before the start resolved one')
    release()
    await hasEvent(w(), s.id, 'sandbox.created')
    const all = await items(w(), s.id)
    const progress = all.filter((i) => i.detail.event === 'sandbox.image_progress')
    assert.equal(progress[0]!.type, 'sandbox')
    assert.deepEqual(progress[0]!.detail, { event: 'sandbox.image_progress', state: 'pending', ref, bytes: 1000, totalBytes: 3000, layers: 2, layersLeft: 1 })
    // The last layer's progress is recorded however soon it follows, and before sandbox.created.
    assert.deepEqual(progress.at(-1)!.detail, { event: 'sandbox.image_progress', state: 'pending', ref, bytes: 3000, totalBytes: 3000, layers: 2, layersLeft: 0 })
    assert.ok(all.findIndex((i) => i.detail.event === 'sandbox.created') > all.indexOf(progress.at(-1)!))
    const up = await read(w(), s.id)
    assert.deepEqual(up.environment.image, { ref, digest: digestOf(ref) })
    assert.deepEqual(fake.creates.filter((c) => c.id === s.id).map((c) => c.image), [{ ref }], 'the first start resolves the reference')

    // Reclaimed at the lifetime ceiling; the next use starts the very digest the first one ran.
    await waitFor('reclaimed', async () => (await read(w(), s.id)).environment.state === 'reclaimed')
    const again = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, payload: { files: [{ path: 'x.txt', content: b64('x') }] } })
    assert.equal(again.statusCode, 200, again.body)
    assert.deepEqual(fake.creates.filter((c) => c.id === s.id).map((c) => c.image), [{ ref }, { ref, digest: digestOf(ref) }])
    assert.deepEqual((await read(w(), s.id)).environment.image, { ref, digest: digestOf(ref) }, 'the recorded digest stays')
    await del(w(), s.id)
  })

  it('an image that cannot be had fails the workspace with workspace.recovery_failed naming the reason, and its use is a 400, never a 5xx', async () => {
    const ref = `${REGISTRY}/tools/fail:nope`
    const s = await create(w(), { image: ref })
    await hasEvent(w(), s.id, 'workspace.recovery_failed')
    const failed = (await items(w(), s.id)).find((i) => i.detail.event === 'workspace.recovery_failed')!
    assert.equal(failed.type, 'error')
    assert.match(String(failed.detail.message), /could not be started: its image 127\.0\.0\.1:5999\/tools\/fail:nope could not be had: the registry has no tag "nope"/)
    const after = await read(w(), s.id)
    assert.equal(after.environment.state, 'failed')
    assert.deepEqual(after.environment.image, { ref, digest: null })
    const use = await w().inject({ method: 'POST', url: `/v1/sessions/${s.id}/files`, payload: { files: [{ path: 'x.txt', content: b64('x') }] } })
    assert.equal(use.statusCode, 400, use.body)
    assert.equal(errorOf(use).code, 'invalid_request')
    assert.match(errorOf(use).message, /the registry has no tag "nope"/)
    await del(w(), s.id)
  })

  it('records at most one progress a second however often the pull reports, and always the last layer', async () => {
    const ref = `${REGISTRY}/tools/chatty:1`
    const s = await create(w(), { image: ref })
    await hasEvent(w(), s.id, 'sandbox.created')
    const progress = (await items(w(), s.id)).filter((i) => i.detail.event === 'sandbox.image_progress').map((i) => [i.detail.bytes, i.detail.layersLeft])
    assert.deepEqual(progress, [[1000, 1], [3000, 0]], 'the first report, then none of the hundred within the second, then the last layer')
    await del(w(), s.id)
  })

  it("a turn whose workspace's image cannot be had fails as sandbox_unavailable with the reason, not internal_error", async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(model, 'openai')
    const sid = await c.session({ environment: { image: `${REGISTRY}/tools/fail:gone` } })
    await waitFor('the workspace failed', async () => (await c.items(sid)).some((i) => i.detail.event === 'workspace.recovery_failed'))
    model.script({ toolCalls: [{ name: 'bash', args: { command: 'echo hi' } }] }, { text: 'Done.' })
    const turn = await c.accept(sid, 'run it')
    const settled = await c.settled(sid, turn.id, 60_000)
    assert.equal(settled.status, 'failed')
    assert.equal(settled.error?.code, 'sandbox_unavailable')
    assert.match(String(settled.error?.message), /its image 127\.0\.0\.1:5999\/tools\/fail:gone could not be had: the registry has no tag "gone"/)
  })

  it('refuses a malformed reference with a 400 naming the field and the fault, storing nothing', async () => {
    const before = (await w().inject({ method: 'GET', url: '/v1/sessions?limit=100' })).json().data.length
    for (const [image, why] of [
      ['Upper/Case:1', /environment\.image: image reference "Upper\/Case:1" has a name that is not lower-case/],
      ['debian@sha256:abc', /environment\.image: .*digest that is not sha256: and 64/],
      ['has space', /environment\.image: .*white space/],
      ['host:99999/x', /environment\.image: /],
      ['', /image/],
    ] as const) {
      const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload: { environment: { image } } })
      assert.equal(res.statusCode, 400, `${image}: ${res.body}`)
      assert.equal(errorOf(res).code, 'invalid_request')
      assert.match(errorOf(res).message, why)
    }
    assert.equal((await w().inject({ method: 'GET', url: '/v1/sessions?limit=100' })).json().data.length, before, 'no session was made')
    const tpl = await w().inject({ method: 'POST', url: '/v1/environment-templates', payload: { name: 'bad-image', image: 'a//b' } })
    assert.equal(tpl.statusCode, 400, tpl.body)
    assert.match(errorOf(tpl).message, /^image: image reference "a\/\/b"/)
    assert.equal((await w().inject({ method: 'GET', url: '/v1/environment-templates' })).json().data.some((t: { name: string }) => t.name === 'bad-image'), false)
  })

  it("a template's image applies to its sessions; a session's own wins; replacing the template without one clears it", async () => {
    const tref = `${REGISTRY}/tools/rust:1`
    const put = await w().inject({ method: 'POST', url: '/v1/environment-templates', payload: { name: 'rusty', image: tref } })
    assert.equal(put.statusCode, 201, put.body)
    assert.equal(put.json().image, tref)
    assert.equal((await w().inject({ method: 'GET', url: `/v1/environment-templates/${put.json().id}` })).json().image, tref)
    const fromTemplate = await create(w(), { template: 'rusty' })
    assert.deepEqual(fromTemplate.environment.image, { ref: tref, digest: null })
    await hasEvent(w(), fromTemplate.id, 'sandbox.created')
    assert.deepEqual(fake.creates.find((c) => c.id === fromTemplate.id)!.image, { ref: tref })
    const own = `${REGISTRY}/tools/go:1.23`
    const overridden = await create(w(), { template: 'rusty', image: own })
    assert.deepEqual(overridden.environment.image, { ref: own, digest: null })
    const replaced = await w().inject({ method: 'POST', url: '/v1/environment-templates', payload: { name: 'rusty' } })
    assert.equal(replaced.statusCode, 200, replaced.body)
    assert.equal(replaced.json().image, null)
    assert.equal((await create(w(), { template: 'rusty' })).environment.image, null)
    for (const id of [fromTemplate.id, overridden.id]) await del(w(), id)
  })
})

forEachDialect('WARREN_DEFAULT_IMAGE', (dialect) => {
  it('is checked at start, and applies when neither the session nor its template names an image', async () => {
    assert.throws(() => loadConfig({ WARREN_DEFAULT_IMAGE: 'Not An Image' }), /WARREN_DEFAULT_IMAGE must be an image reference .*white space/)
    const fake = imageFake()
    const ref = `${REGISTRY}/base/debian:12`
    const w = await startWarren(dialect, { env: { WARREN_SANDBOX_PROVIDER: IMAGE_KIND, WARREN_DEFAULT_IMAGE: ref }, providers: { [IMAGE_KIND]: fake.kind } })
    try {
      await connectModel(w)
      const s = await create(w)
      assert.deepEqual(s.environment.image, { ref, digest: null })
      await hasEvent(w, s.id, 'sandbox.created')
      assert.deepEqual(fake.creates.find((c) => c.id === s.id)!.image, { ref })
      assert.deepEqual((await read(w, s.id)).environment.image, { ref, digest: digestOf(ref) })
      const own = await create(w, { image: `${REGISTRY}/mine:1` })
      assert.deepEqual(own.environment.image, { ref: `${REGISTRY}/mine:1`, digest: null })
    } finally {
      await w.close()
    }
  })
})
