// Image workspaces end to end: the real service (startWarren), the real local provider on an
// overlay of the cached layers, a real registry on loopback (Debian's docker-registry) holding the
// minimal busybox image built by mmdebstrap (test/registry.ts), and turns driven by the fake model
// server. test/images.api.test.ts covers the API with a fake provider and test/sandbox.image.test.ts
// the provider alone; this file is where the two meet.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { forEachDialect, startWarren, useWarren, type Warren } from './harness.ts'
import { waitFor } from './fixtures.ts'
import { removeSharedStore } from './restart-store.ts'
import { localKind } from '../src/sandbox/local/local-kind.ts'
import { randomText } from '../src/shared/ids.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { client, newOrg, NO_RATE_LIMITS, runBash, type ItemJson } from './turns.helpers.ts'
import { gzipLayer, pushImage, pushMinimalImage, sha256, startRegistry, tarOf, type Registry } from './registry.ts'

const skip = process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap && command -v docker-registry && command -v skopeo']).status !== 0 ? 'needs bubblewrap, docker-registry and skopeo' : false

// The registry is on loopback, which the service reaches over plain HTTP (as Docker does) but only
// when its address is allowed, as for model servers.
const IMAGE_ENV = { ...NO_RATE_LIMITS, WARREN_IMAGE_ALLOW_PRIVATE: '127.0.0.1/32' }

let registry: Registry
let minimal: string
let minimalDigest: string
if (!skip) {
  before(async () => {
    registry = await startRegistry()
    await pushMinimalImage(registry, 'warren/minimal', '1')
    minimal = `${registry.host}/warren/minimal:1`
    const res = await fetch(`${registry.url}/v2/warren/minimal/manifests/1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })
    minimalDigest = sha256(Buffer.from(await res.arrayBuffer()))
  })
  after(async () => {
    await registry?.stop()
  })
}

const events = (items: ItemJson[]) => items.map((i) => i.detail.event)

/** The sandboxes' own writable layers kept under the data folder (the local provider's `.layers`). */
const layersUnder = (dataDir: string): string[] => {
  const dir = path.join(dataDir, 'workspaces', '.layers')
  return fs.existsSync(dir) ? fs.readdirSync(dir) : []
}

forEachDialect('image workspaces through the service', (dialect) => {
  describe('on the minimal image', { skip }, () => {
    const w = useWarren(dialect, { env: IMAGE_ENV })
    let model: FakeModelServer
    let c: ReturnType<typeof client>
    before(async () => {
      model = await startModelServer({ models: ['m1'] })
      c = client(w(), await newOrg(w()))
      await c.connect(model, 'openai')
    })
    after(() => model?.close())
    let first: string

    it("runs a turn on the image's root: reads what only the image has, writes /workspace; shows the digest; progress before sandbox.created", async () => {
      assert.ok(!fs.existsSync('/srv/hello'), 'the host has no /srv/hello, so reading it proves the image root')
      first = await c.session({ environment: { image: minimal } })
      const { turn, output } = await runBash(
        c,
        model,
        first,
        'busybox cat /srv/hello && echo made-in-turn > /workspace/made.txt && busybox cat /workspace/made.txt && echo outside > /srv/sticky/outside.txt && echo "uid=$(busybox id -u) pwd=$(busybox pwd)"',
      )
      assert.equal(turn.status, 'completed', JSON.stringify(turn.error))
      assert.match(output, /hello from the image\nmade-in-turn\n/)
      // Without root ranges the agent is the sandbox's unprivileged uid, in /workspace.
      assert.match(output, /uid=(\d+) pwd=\/workspace/)
      assert.notEqual(output.match(/uid=(\d+)/)![1], '0')
      const s = await c.getSession(first)
      assert.equal(s.environment.state, 'running')
      assert.deepEqual(s.environment.image, { ref: minimal, digest: minimalDigest })
      const items = await c.items(first)
      const lastProgress = items.filter((i) => i.detail.event === 'sandbox.image_progress').at(-1)!
      assert.deepEqual({ ...lastProgress.detail, bytes: 0, totalBytes: 0 }, { event: 'sandbox.image_progress', state: 'pending', ref: minimal, bytes: 0, totalBytes: 0, layers: 2, layersLeft: 0 })
      assert.equal(lastProgress.detail.bytes, lastProgress.detail.totalBytes, 'every byte of the image held')
      const all = events(items)
      const progress = all.indexOf('sandbox.image_progress')
      assert.ok(progress >= 0, `a sandbox.image_progress item: ${all.join(', ')}`)
      assert.ok(progress < all.indexOf('sandbox.created'), `progress before sandbox.created: ${all.join(', ')}`)
    })

    it('gives a second session on the same image a layer of its own: it does not see what the first wrote outside /workspace', async () => {
      const second = await c.session({ environment: { image: minimal } })
      const { turn, output } = await runBash(c, model, second, 'busybox cat /srv/hello; if [ -e /srv/sticky/outside.txt ]; then echo SEEN; else echo ABSENT; fi; if [ -e /workspace/made.txt ]; then echo WS-SEEN; else echo WS-ABSENT; fi')
      assert.equal(turn.status, 'completed', JSON.stringify(turn.error))
      assert.match(output, /hello from the image\nABSENT\nWS-ABSENT\n/)
      assert.deepEqual((await c.getSession(second)).environment.image, { ref: minimal, digest: minimalDigest })
      // The first still has its own file.
      const again = await runBash(c, model, first, 'busybox cat /srv/sticky/outside.txt')
      assert.match(again.output, /^outside\n/)
    })

    it("GET /metrics counts the node's pulls: the first session's downloaded the image, the second's was a cache hit", async () => {
      const res = await w().inject({ method: 'GET', url: '/metrics', token: null })
      const v = (name: string) => Number(res.body.match(new RegExp(`^${name} (\\S+)$`, 'm'))?.[1])
      assert.ok(v('warren_image_pulls_started_total') >= 2, res.body)
      assert.equal(v('warren_image_pulls_started_total'), Number(res.body.match(/^warren_image_pulls_settled_total\{outcome="succeeded"\} (\S+)$/m)?.[1]))
      assert.ok(v('warren_image_cache_hits_total') >= 1)
      assert.ok(v('warren_image_downloaded_bytes_total') > 5_000_000, 'the minimal image is 5.7 MB gzipped')
      assert.equal(v('warren_image_cache_layers'), 2)
      assert.ok(v('warren_image_cache_bytes') > 10_000_000, 'and unpacks to 14 MB')
    })

    it('an unknown tag fails the workspace with workspace.recovery_failed naming the reason, and a turn as sandbox_unavailable; no 5xx', async () => {
      const ref = `${registry.host}/warren/minimal:nope`
      const sid = await c.session({ environment: { image: ref } })
      const failed = await waitFor('workspace.recovery_failed', async () => (await c.items(sid)).find((i) => i.detail.event === 'workspace.recovery_failed'), 60_000)
      assert.match(String(failed.detail.message), /its image 127\.0\.0\.1:\d+\/warren\/minimal:nope could not be had: registry 127\.0\.0\.1:\d+ has no manifest warren\/minimal:nope \(MANIFEST_UNKNOWN\)$/)
      const s = await c.getSession(sid)
      assert.equal(s.environment.state, 'failed')
      assert.deepEqual(s.environment.image, { ref, digest: null })
      const { turn } = await runBash(c, model, sid, 'echo never')
      assert.equal(turn.status, 'failed')
      assert.equal(turn.error?.code, 'sandbox_unavailable')
      assert.match(String(turn.error?.message), /has no manifest warren\/minimal:nope/)
      for (const url of [`/v1/sessions/${sid}`, `/v1/sessions/${sid}/items`, `/v1/sessions/${sid}/turns`]) {
        const res = await c.call('GET', url)
        assert.ok(res.statusCode < 500, `${url}: ${res.statusCode} ${res.body}`)
      }
      const upload = await c.call('POST', `/v1/sessions/${sid}/files`, { files: [{ path: 'x.txt', content: Buffer.from('x').toString('base64') }] })
      assert.equal(upload.statusCode, 400, upload.body)
    })

    it('deleting the sessions removes their own layers', async () => {
      const kept = layersUnder(w().dataDir)
      assert.ok(kept.length >= 2, `the two image workspaces' layers are kept under the data folder: ${kept.join(', ')}`)
      const list = (await c.call('GET', '/v1/sessions?limit=100')).json().data as { id: string }[]
      for (const s of list) assert.ok((await c.call('DELETE', `/v1/sessions/${s.id}`)).statusCode < 300)
      await waitFor('no layer left under the data folder', async () => layersUnder(w().dataDir).length === 0, 60_000)
    })
  })

  describe('reclaimed and restored', { skip }, () => {
    // A short lifetime: the workspace is reclaimed soon after it comes up, and the next turn restores it.
    const w = useWarren(dialect, { env: { ...IMAGE_ENV, WARREN_WORKSPACE_LIFETIME_MS: '1500' } })
    let model: FakeModelServer
    before(async () => {
      model = await startModelServer({ models: ['m1'] })
    })
    after(() => model?.close())

    it('comes back on the digest it first ran, with its own layer and its /workspace', async () => {
      const c = client(w(), await newOrg(w()))
      await c.connect(model, 'openai')
      // A tag of its own, moved while the workspace is away.
      await pushMinimalImage(registry, 'warren/minimal', 'moving')
      const ref = `${registry.host}/warren/minimal:moving`
      const sid = await c.session({ environment: { image: ref } })
      const first = await runBash(c, model, sid, 'echo kept > /srv/sticky/kept.txt && echo ws > /workspace/ws.txt')
      assert.equal(first.turn.status, 'completed', JSON.stringify(first.turn.error))
      assert.deepEqual((await c.getSession(sid)).environment.image, { ref, digest: minimalDigest })
      await waitFor('reclaimed', async () => (await c.getSession(sid)).environment.state === 'reclaimed', 60_000)
      // The tag now names an image without busybox: a restore that followed it could run nothing.
      const moved = await pushImage(registry, 'warren/minimal', 'moving', [gzipLayer(tarOf([{ path: 'srv/', type: 'Directory' }, { path: 'srv/other', body: 'other\n' }]))])
      assert.notEqual(moved.digest, minimalDigest)
      const again = await runBash(c, model, sid, 'busybox cat /srv/sticky/kept.txt /workspace/ws.txt /srv/hello')
      assert.equal(again.turn.status, 'completed', JSON.stringify(again.turn.error))
      assert.match(again.output, /^kept\nws\nhello from the image\n/)
      assert.deepEqual((await c.getSession(sid)).environment.image, { ref, digest: minimalDigest })
    })
  })

  describe('with WARREN_SANDBOX_ROOT_RANGES=1', { skip }, () => {
    let w: Warren | undefined
    let model: FakeModelServer
    let c: ReturnType<typeof client>
    let rooted: string
    before(async () => {
      w = await startWarren(dialect, { env: { ...IMAGE_ENV, WARREN_SANDBOX_ROOT_RANGES: '1' } })
      model = await startModelServer({ models: ['m1'] })
      c = client(w, await newOrg(w))
      await c.connect(model, 'openai')
    })
    after(async () => {
      await model?.close()
      await w?.close()
    })

    it('the agent is root inside its own user namespace, and can write the image root', async () => {
      rooted = await c.session({ environment: { image: minimal } })
      const { turn, output } = await runBash(c, model, rooted, 'echo "uid=$(busybox id -u)"; echo root-wrote > /etc/by-root && busybox cat /etc/by-root')
      assert.equal(turn.status, 'completed', JSON.stringify(turn.error))
      assert.match(output, /uid=0\nroot-wrote\n/)
    })

    it("a template's setup script runs as root inside the image workspace", async () => {
      // The one root range is the first session's while it lives; deleting it gives the range back.
      assert.ok((await c.call('DELETE', `/v1/sessions/${rooted}`)).statusCode < 300)
      const tpl = await c.call('POST', '/v1/environment-templates', { name: 'rooted', image: minimal, setup: 'busybox id -u > /etc/setup-uid && echo ran > /workspace/setup-ran' })
      assert.equal(tpl.statusCode, 201, tpl.body)
      const sid = await c.session({ environment: { template: 'rooted' } })
      const { turn, output } = await runBash(c, model, sid, 'busybox cat /etc/setup-uid /workspace/setup-ran')
      assert.equal(turn.status, 'completed', JSON.stringify(turn.error))
      assert.match(output, /^0\nran\n/)
    })

    // The sandbox's side alone, the same on either store: run once.
    it("runs commands, its template setup too, as the image's User (name:group from its own /etc/passwd and /etc/group), /workspace its own", { skip: dialect === 'postgres' ? 'the same on SQLite' : false }, async () => {
      // The one range is the template session's while it lives.
      const list = (await c.call('GET', '/v1/sessions?limit=100')).json().data as { id: string }[]
      for (const s of list) assert.ok((await c.call('DELETE', `/v1/sessions/${s.id}`)).statusCode < 300)
      // The minimal image's layers, and one more with the users, under a config that names one.
      const manifest = (await (await fetch(`${registry.url}/v2/warren/minimal/manifests/1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })).json()) as { config: { digest: string }; layers: { digest: string; mediaType: string }[] }
      const config = (await (await fetch(`${registry.url}/v2/warren/minimal/blobs/${manifest.config.digest}`)).json()) as { rootfs: { diff_ids: string[] } }
      const base = await Promise.all(manifest.layers.map(async (l, i) => ({ tar: Buffer.alloc(0), blob: Buffer.from(await (await fetch(`${registry.url}/v2/warren/minimal/blobs/${l.digest}`)).arrayBuffer()), digest: l.digest, diffId: config.rootfs.diff_ids[i]!, mediaType: l.mediaType })))
      const users = gzipLayer(tarOf([
        { path: 'etc/', type: 'Directory' },
        { path: 'etc/passwd', body: 'root:x:0:0:root:/root:/bin/sh\nbuilder:x:1234:2345::/home/builder:/bin/sh\n' },
        { path: 'etc/group', body: 'root:x:0:\nbuilders:x:2345:\ntools:x:3456:\n' },
      ]))
      await pushImage(registry, 'warren/minimal', 'user', [...base, users], { config: { User: 'builder:tools', Env: ['PATH=/usr/bin:/bin'] } })
      const ref = `${registry.host}/warren/minimal:user`
      const tpl = await c.call('POST', '/v1/environment-templates', { name: 'as-user', image: ref, setup: 'busybox id -u > /workspace/setup-uid' })
      assert.equal(tpl.statusCode, 201, tpl.body)
      const sid = await c.session({ environment: { template: 'as-user' } })
      const { turn, output } = await runBash(c, model, sid, 'echo "$(busybox id -u):$(busybox id -g) groups=$(busybox id -G)"; busybox cat /workspace/setup-uid; { echo no > /etc/by-user; } 2>/dev/null && echo WROTE || echo REFUSED; echo mine > /workspace/by-user && busybox stat -c %u:%g /workspace/by-user')
      assert.equal(turn.status, 'completed', JSON.stringify(turn.error))
      // Its own user and the named group, no others, for the setup too; the image's root is not its to
      // write; /workspace is, and shows as its own.
      assert.match(output, /^1234:3456 groups=3456\n1234\nREFUSED\n1234:3456\n/)
      // On the host the workspace's files are still the workspace uid's, as every reader of it expects.
      const wsDir = path.join(w!.dataDir, 'workspaces', sid)
      const owner = fs.statSync(wsDir).uid
      assert.deepEqual([fs.statSync(path.join(wsDir, 'by-user')).uid, fs.statSync(path.join(wsDir, 'setup-uid')).uid], [owner, owner])
    })
  })

  it('a workspace brought back after a restart, on other uids, keeps its own layer (files, owners, a whiteout, an opaque folder) and the range it is owned from, though a new one started first', { skip }, async () => {
    const model = await startModelServer({ models: ['m1'] })
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-image-restart-'))
    const pgSchema = `t_${randomText(12)}`
    // The same node resources across the restart but the uids: the harness picks new ones per start
    // otherwise. The second start gives other uids and root ranges, as another node would: the
    // layer's files must come back owned from its new range (on PostgreSQL from the snapshot, on
    // SQLite the layer kept here, given to the new range).
    const prefix = `r${randomText(4)}`
    const uidBase = 300_000 + Math.floor(Math.random() * 600) * 1000
    const start = (base: number) => startWarren(dialect, { dataDir, pgSchema, sandboxPrefix: prefix, providers: { local: localKind({ prefix, uidBase: base, uidCount: 1000 }) }, env: { ...IMAGE_ENV, WARREN_SANDBOX_ROOT_RANGES: '2' } })
    let first: Warren | undefined = await start(uidBase)
    let second: Warren | undefined
    try {
      const org = await newOrg(first)
      const c1 = client(first, org)
      await c1.connect(model, 'openai')
      const a = await c1.session({ environment: { image: minimal } })
      const made = await runBash(c1, model, a, 'echo one > /etc/a-file && busybox mkdir -p /opt/x /opt/owned && echo tool > /opt/x/run && echo f > /opt/owned/f && busybox chown -R 1234:2345 /opt/owned && busybox rm /srv/hello && busybox rm -r /etc/apt && busybox mkdir /etc/apt && echo mine > /etc/apt/mine && busybox id -u')
      assert.equal(made.turn.status, 'completed', JSON.stringify(made.turn.error))
      assert.match(made.output, /^0\n/)
      await first.close()
      first = undefined

      const uidBase2 = uidBase + 200_000
      second = await start(uidBase2)
      const c2 = client(second, org)
      // A new session first: it must not take the range the kept layer of the other is owned from.
      const b = await c2.session({ environment: { image: minimal } })
      const other = await runBash(c2, model, b, 'busybox id -u')
      assert.equal(other.turn.status, 'completed', JSON.stringify(other.turn.error))
      const back = await runBash(c2, model, a, 'echo two >> /etc/a-file && busybox cat /etc/a-file /opt/x/run && busybox stat -c %u:%g /etc/a-file /opt/owned /opt/owned/f; if [ -e /srv/hello ]; then echo HELLO-BACK; else echo HELLO-GONE; fi; busybox ls /etc/apt')
      assert.equal(back.turn.status, 'completed', JSON.stringify(back.turn.error))
      // Its own files kept, still its root's to write; the chowned ones its uid 1234's; the image
      // file it deleted still deleted; the folder it made again over the image's still hides what the image had there.
      assert.match(back.output, /^one\ntwo\ntool\n0:0\n1234:2345\n1234:2345\nHELLO-GONE\nmine\n(?!only-this)/)
      // On the host, owned from the second start's root range (its first uid past the node's 1000).
      const f = fs.statSync(path.join(dataDir, 'workspaces', '.layers', a, 'upper', 'opt', 'owned', 'f'))
      const ranges = [uidBase2 + 1000, uidBase2 + 1000 + 65_536]
      assert.ok(ranges.some((r) => f.uid === r + 1234 && f.gid === r + 2345), `owned from a range of the second start: ${f.uid}:${f.gid}`)
    } finally {
      await first?.close()
      await second?.close()
      await model.close()
      await removeSharedStore(dialect, dataDir, pgSchema)
    }
  })
})
