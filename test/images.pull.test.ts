import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { loadConfig } from '../src/config.ts'
import { configuredImagePuller, imagePuller, type ImagePuller, type PullProgress } from '../src/images/image-puller.ts'
import { ImagePullError, type ImagePullReason } from '../src/images/image-pull-error.ts'
import { RegistryCredentials } from '../src/images/registry-credentials.ts'
import type { Resolver } from '../src/shared/guarded-lookup.ts'
import { makeTestCert } from './fakes/test-cert.ts'
import { gzipLayer, imageConfig, listTree, manifestOf, pushBlob, pushImage, pushManifest, pushMinimalImage, sha256, startProxy, startRegistry, tarOf, type Proxy, type Registry, type TarEntry } from './registry.ts'

// Pulls against a real docker-registry on loopback, through a proxy that counts what is asked
// (and, for the hostile cases, answers instead of the registry).

let registry: Registry
let proxy: Proxy
let minimalDigest: string
const caches: string[] = []

/** A puller with a cache of its own, reaching the registry through the proxy. */
function newPuller(extra: Partial<Parameters<typeof imagePuller>[0]> = {}): { puller: ImagePuller; dir: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-images-'))
  caches.push(dir)
  return { puller: imagePuller({ dir, registry: { allowPrivate: ['127.0.0.1/32'], idleTimeoutMs: 5_000 }, ...extra }), dir }
}

async function rejects(p: Promise<unknown>, reason: ImagePullReason, message: RegExp): Promise<ImagePullError> {
  let caught: unknown
  await p.then(
    () => assert.fail(`expected a ${reason} failure`),
    (err: unknown) => (caught = err),
  )
  assert.ok(caught instanceof ImagePullError, `not an ImagePullError: ${String(caught)}`)
  assert.equal(caught.reason, reason, caught.message)
  assert.match(caught.message, message)
  return caught
}

/** The cache holds no layer but the ones listed, and nothing in progress. */
function assertCacheHolds(dir: string, layers: string[]): void {
  assert.deepEqual(fs.readdirSync(path.join(dir, 'layers')).sort(), layers.map((d) => d.slice(7)).sort())
  assert.deepEqual(listTree(path.join(dir, 'tmp')), [], 'nothing half unpacked is left')
}

const blobGets = (name: string) => proxy.count(new RegExp(`^GET /v2/${name}/blobs/`))

before(async () => {
  registry = await startRegistry()
  proxy = await startProxy(registry)
  await pushMinimalImage(registry, 'warren/minimal', '1')
  const res = await fetch(`${registry.url}/v2/warren/minimal/manifests/1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })
  minimalDigest = sha256(Buffer.from(await res.arrayBuffer()))
})

after(async () => {
  await proxy?.stop()
  await registry?.stop()
  for (const dir of caches) fs.rmSync(dir, { recursive: true, force: true })
})

describe('pulling the minimal image', () => {
  test('every layer is unpacked with its files, modes, owners and links, and overlayfs reads the layers as the image', async () => {
    const { puller, dir } = newPuller()
    const progress: PullProgress[] = []
    const image = await puller.pull(`${proxy.host}/warren/minimal:1`, { onProgress: (p) => progress.push({ ...p }) })
    assert.equal(image.digest, minimalDigest)
    assert.equal(image.manifestDigest, minimalDigest)
    assert.equal(image.ref, `${proxy.host}/warren/minimal:1`)
    assert.deepEqual(image.config.config.Env, ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'])
    assert.equal(image.layers.length, 2)
    assert.ok(image.layers.every((l) => l.fetched))
    assertCacheHolds(dir, image.layers.map((l) => l.digest))
    const [lower, upper] = image.layers.map((l) => l.dir) as [string, string]

    // Debian's files, as GNU tar would have unpacked them.
    const busybox = fs.lstatSync(path.join(lower, 'bin/busybox'))
    assert.ok(busybox.isFile() && busybox.size > 100_000)
    assert.equal(busybox.mode & 0o7777, 0o755)
    assert.equal(fs.readlinkSync(path.join(lower, 'lib64/ld-linux-x86-64.so.2')), '/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2', 'an absolute link target is kept, not resolved')
    // The upper layer's entries.
    assert.equal(fs.readlinkSync(path.join(upper, 'bin/sh')), 'busybox')
    const hello = fs.statSync(path.join(upper, 'srv/hello'))
    assert.equal(hello.ino, fs.statSync(path.join(upper, 'srv/hello-hardlink')).ino, 'a hard link is one file')
    assert.equal(hello.nlink, 2)
    assert.equal(fs.readFileSync(path.join(upper, 'srv/hello'), 'utf8'), 'hello from the image\n')
    assert.equal(fs.statSync(path.join(upper, 'srv/setuid-probe')).mode & 0o7777, 0o4755, 'setuid survives the chown')
    assert.equal(fs.statSync(path.join(upper, 'srv/sticky')).mode & 0o7777, 0o1777)
    const owned = fs.statSync(path.join(upper, 'srv/owned'))
    assert.deepEqual([owned.uid, owned.gid, owned.mode & 0o7777], [1234, 2345, 0o750])
    const file = fs.statSync(path.join(upper, 'srv/owned/file'))
    assert.deepEqual([file.uid, file.gid, file.mode & 0o7777], [1234, 2345, 0o640])
    assert.equal(fs.statSync(path.join(upper, 'srv')).mtime.toISOString(), '2024-01-01T00:00:00.000Z', 'a folder keeps its time, set after its entries')
    // The whiteout and the opaque folder, as overlayfs reads them.
    const whiteout = fs.lstatSync(path.join(upper, 'etc/hostname'))
    assert.ok(whiteout.isCharacterDevice() && whiteout.rdev === 0, 'a whiteout is a 0/0 character device')
    assert.equal(execFileSync('getfattr', ['--absolute-names', '--only-values', '-n', 'trusted.overlay.opaque', path.join(upper, 'etc/apt')], { encoding: 'utf8' }), 'y')
    assert.ok(!fs.existsSync(path.join(upper, 'etc/.wh.hostname')) && !fs.existsSync(path.join(upper, 'etc/apt/.wh..wh..opq')), 'the markers themselves are not files')

    // Mounted as the sandbox will: the image's root, its programs run.
    const mnt = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-image-root-'))
    execFileSync('mount', ['-t', 'overlay', 'overlay', '-o', `ro,lowerdir=${upper}:${lower}`, mnt])
    try {
      assert.ok(!fs.existsSync(path.join(mnt, 'etc/hostname')), 'the whiteout hides the lower file')
      assert.deepEqual(fs.readdirSync(path.join(mnt, 'etc/apt')), ['only-this'], 'the opaque folder hides the lower folder')
      assert.ok(fs.existsSync(path.join(mnt, 'etc/fstab')), 'the lower layer shows through elsewhere')
      assert.equal(execFileSync('chroot', [mnt, '/bin/sh', '-c', 'busybox cat /srv/hello'], { encoding: 'utf8' }), 'hello from the image\n')
    } finally {
      execFileSync('umount', [mnt])
      fs.rmdirSync(mnt)
    }

    // Progress: from nothing to everything, layer by layer.
    const total = image.layers.reduce((n, l) => n + l.size, 0)
    assert.deepEqual(progress[0], { ref: image.ref, bytes: 0, totalBytes: total, layers: 2, layersLeft: 2 })
    assert.deepEqual(progress.at(-1), { ref: image.ref, bytes: total, totalBytes: total, layers: 2, layersLeft: 0 })
    assert.ok(progress.some((p) => p.bytes > 0 && p.bytes < total), 'bytes are reported as they come')
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i]!.bytes >= progress[i - 1]!.bytes && progress[i]!.layersLeft <= progress[i - 1]!.layersLeft)
  })

  test('a second pull is a cache hit: the manifest is asked again, no blob is downloaded, the folders are the same', async () => {
    const { puller } = newPuller()
    const first = await puller.pull(`${proxy.host}/warren/minimal:1`)
    const inodes = first.layers.map((l) => fs.statSync(l.dir).ino)
    const blobsBefore = blobGets('warren/minimal')
    const manifestsBefore = proxy.count(/^GET \/v2\/warren\/minimal\/manifests\//)
    const progress: PullProgress[] = []
    const second = await puller.pull(`${proxy.host}/warren/minimal:1`, { onProgress: (p) => progress.push(p) })
    assert.equal(blobGets('warren/minimal'), blobsBefore, 'no blob (layer or config) asked for')
    assert.equal(proxy.count(/^GET \/v2\/warren\/minimal\/manifests\//), manifestsBefore + 1, 'a tag is resolved again: it may have moved')
    assert.equal(second.digest, first.digest)
    assert.deepEqual(second.layers.map((l) => l.fetched), [false, false])
    assert.deepEqual(second.layers.map((l) => fs.statSync(l.dir).ino), inodes)
    assert.deepEqual(progress, [{ ref: second.ref, bytes: progress[0]!.totalBytes, totalBytes: progress[0]!.totalBytes, layers: 2, layersLeft: 0 }])
  })

  test('concurrent pulls of one image download each blob once and all get the image', async () => {
    const { puller, dir } = newPuller()
    const before = blobGets('warren/minimal')
    const seen: PullProgress[][] = [[], [], []]
    const images = await Promise.all(seen.map((s) => puller.pull(`${proxy.host}/warren/minimal:1`, { onProgress: (p) => s.push(p) })))
    assert.equal(blobGets('warren/minimal') - before, 3, 'two layers and the config, once each')
    assert.ok(images.every((i) => i.digest === minimalDigest))
    assert.deepEqual(new Set(images.flatMap((i) => i.layers.map((l) => l.dir))).size, 2)
    for (const s of seen) assert.equal(s.at(-1)?.layersLeft, 0, 'every caller hears the shared pull finish')
    assertCacheHolds(dir, images[0]!.layers.map((l) => l.digest))
  })

  test('layers downloaded at once on a node are capped (maxConcurrentLayers)', async () => {
    const { puller } = newPuller({ maxConcurrentLayers: 1 })
    proxy.maxBlobsAtOnce = 0
    const image = await puller.pull(`${proxy.host}/warren/minimal:1`)
    assert.equal(image.layers.length, 2)
    assert.equal(proxy.maxBlobsAtOnce, 1, 'one blob at a time')
  })

  test('two references to images sharing layers, pulled at once, download each layer once', async () => {
    const { puller, dir } = newPuller()
    const manifest = JSON.parse(Buffer.from(await (await fetch(`${registry.url}/v2/warren/minimal/manifests/1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })).arrayBuffer()).toString()) as { layers: { digest: string }[] }
    const layerGets = () => manifest.layers.reduce((n, l) => n + proxy.count(new RegExp(`^GET /v2/warren/minimal/blobs/${l.digest}$`)), 0)
    const before = layerGets()
    const [byTag, byDigest] = await Promise.all([puller.pull(`${proxy.host}/warren/minimal:1`), puller.pull(`${proxy.host}/warren/minimal@${minimalDigest}`)])
    assert.equal(layerGets() - before, 2, 'each of the two layers downloaded once for both pulls')
    assert.deepEqual(byTag.layers.map((l) => l.dir), byDigest.layers.map((l) => l.dir))
    assertCacheHolds(dir, byTag.layers.map((l) => l.digest))
  })

  test('by digest: the same image; a digest the registry lacks is not found', async () => {
    const { puller } = newPuller()
    const image = await puller.pull(`${proxy.host}/warren/minimal@${minimalDigest}`)
    assert.equal(image.digest, minimalDigest)
    assert.equal(image.ref, `${proxy.host}/warren/minimal@${minimalDigest}`)
    await rejects(puller.pull(`${proxy.host}/warren/minimal@sha256:${'0'.repeat(64)}`), 'not_found', /has no manifest warren\/minimal@sha256:0+ \(MANIFEST_UNKNOWN\)/)
  })

  test('an unknown tag, an unknown name and a malformed reference fail clearly, leaving the cache empty', async () => {
    const { puller, dir } = newPuller()
    await rejects(puller.pull(`${proxy.host}/warren/minimal:nope`), 'not_found', /has no manifest warren\/minimal:nope/)
    await rejects(puller.pull(`${proxy.host}/warren/absent:1`), 'not_found', /has no manifest warren\/absent:1/)
    const asked = proxy.requests.length
    await rejects(puller.pull(`${proxy.host}/Warren/Minimal:1`), 'malformed_reference', /lower-case/)
    await rejects(puller.pull(`${proxy.host}/warren/minimal@sha256:xyz`), 'malformed_reference', /digest/)
    assert.equal(proxy.requests.length, asked, 'a malformed reference asks the registry nothing')
    assertCacheHolds(dir, [])
  })

  test('a multi-platform index resolves to this host\'s manifest; an index without it fails', async () => {
    // The same layers, with an arm64 config beside the amd64 one.
    const amd64 = await (await fetch(`${registry.url}/v2/warren/minimal/manifests/1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })).arrayBuffer()
    const parsed = JSON.parse(Buffer.from(amd64).toString()) as { layers: { digest: string }[] }
    const cfg = JSON.parse(Buffer.from(await (await fetch(`${registry.url}/v2/warren/minimal/blobs/${(JSON.parse(Buffer.from(amd64).toString()) as { config: { digest: string } }).config.digest}`)).arrayBuffer()).toString())
    const armConfig = Buffer.from(JSON.stringify({ ...cfg, architecture: 'arm64' }))
    await pushBlob(registry, 'warren/minimal', armConfig)
    const armManifest = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(amd64).toString()), config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(armConfig), size: armConfig.length } }))
    const armDigest = await pushManifest(registry, 'warren/minimal', sha256(armManifest), armManifest)
    const index = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.index.v1+json',
        manifests: [
          { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: armDigest, size: armManifest.length, platform: { os: 'linux', architecture: 'arm64' } },
          { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: minimalDigest, size: amd64.byteLength, platform: { os: 'linux', architecture: 'amd64' } },
        ],
      }),
    )
    const indexDigest = await pushManifest(registry, 'warren/minimal', 'multi', index, 'application/vnd.oci.image.index.v1+json')
    const { puller } = newPuller({ platform: { os: 'linux', architecture: 'amd64' } })
    const image = await puller.pull(`${proxy.host}/warren/minimal:multi`)
    assert.equal(image.digest, indexDigest, 'the digest the reference resolved to is the index\'s')
    assert.equal(image.manifestDigest, minimalDigest)
    assert.deepEqual(image.layers.map((l) => l.digest), parsed.layers.map((l) => l.digest))
    const arm = await newPuller({ platform: { os: 'linux', architecture: 'arm64' } }).puller.pull(`${proxy.host}/warren/minimal:multi`)
    assert.equal(arm.manifestDigest, armDigest)
    const other = newPuller({ platform: { os: 'linux', architecture: 's390x' } })
    await rejects(other.puller.pull(`${proxy.host}/warren/minimal:multi`), 'unsupported', /no manifest for linux\/s390x \(it has linux\/arm64, linux\/amd64\)/)
    assertCacheHolds(other.dir, [])
    // A single-platform image for another platform is refused too.
    await rejects(other.puller.pull(`${proxy.host}/warren/minimal:1`), 'unsupported', /image for linux\/amd64, not linux\/s390x/)
  })
})

describe('hostile images', () => {
  /** Pushes a one-layer image of these entries; answers its reference and its layer's digest. */
  async function hostile(entries: TarEntry[], plain = false): Promise<{ ref: string; layer: string; name: string }> {
    const name = `hostile/${randomUUID().slice(0, 8)}`
    const built = gzipLayer(tarOf(entries))
    const layer = plain ? { ...built, blob: built.tar, digest: built.diffId, mediaType: 'application/vnd.oci.image.layer.v1.tar' } : built
    await pushImage(registry, name, '1', [layer])
    return { ref: `${proxy.host}/${name}:1`, layer: layer.digest, name }
  }
  const marker = () => `warren-escape-${randomUUID().slice(0, 8)}`

  test('layer rules: a whiteout hides only lower layers, an entry replaces what was there, a folder keeps its place', async () => {
    const { puller } = newPuller()
    const img = await hostile([
      { path: 'kept', body: 'this layer\'s own' },
      { path: '.wh.kept' },
      { path: 'gone-below' , type: 'Directory' },
      { path: '.wh.gone-below-too' },
      { path: 'twice', body: 'first' },
      { path: 'twice', type: 'SymbolicLink', linkpath: 'kept' },
      { path: 'dir/', type: 'Directory', mode: 0o700 },
      { path: 'dir/inside', body: 'x' },
      { path: 'dir/', type: 'Directory', mode: 0o555 },
      { path: 'file-then-dir', body: 'x' },
      { path: 'file-then-dir/', type: 'Directory' },
      { path: 'file-then-dir/y', body: 'y' },
      { path: 'pipe', type: 'FIFO', mode: 0o640 },
      { path: 'pipe-then-file', type: 'FIFO' },
      { path: 'pipe-then-file', body: 'file' },
    ])
    const dir = (await puller.pull(img.ref)).layers[0]!.dir
    assert.equal(fs.readFileSync(path.join(dir, 'kept'), 'utf8'), "this layer's own", 'a whiteout does not hide its own layer\'s file')
    assert.ok(fs.lstatSync(path.join(dir, 'gone-below-too')).isCharacterDevice())
    assert.equal(fs.readlinkSync(path.join(dir, 'twice')), 'kept', 'the later entry replaces the earlier')
    assert.equal(fs.statSync(path.join(dir, 'dir')).mode & 0o777, 0o555, 'the last entry for a folder sets its mode')
    assert.equal(fs.readFileSync(path.join(dir, 'dir/inside'), 'utf8'), 'x', 'and its entries stay')
    assert.equal(fs.readFileSync(path.join(dir, 'file-then-dir/y'), 'utf8'), 'y')
    const pipe = fs.lstatSync(path.join(dir, 'pipe'))
    assert.ok(pipe.isFIFO() && (pipe.mode & 0o777) === 0o640, 'a FIFO is made, with its mode')
    assert.equal(fs.readFileSync(path.join(dir, 'pipe-then-file'), 'utf8'), 'file', 'a later entry takes a FIFO\'s path')
  })

  test('what a crashed pull left half unpacked is removed when the puller starts', async () => {
    const { dir } = newPuller()
    fs.mkdirSync(path.join(dir, 'tmp', 'abc-half'), { recursive: true })
    fs.writeFileSync(path.join(dir, 'tmp', 'abc-half', 'partial'), 'x')
    imagePuller({ dir, registry: { allowPrivate: [] } })
    assertCacheHolds(dir, [])
  })

  test('an entry with .. fails the pull, and nothing is written outside the cache', async () => {
    const { puller, dir } = newPuller()
    const name = marker()
    const img = await hostile([{ path: 'ok', body: 'fine' }, { path: `../../../../../../tmp/${name}`, body: 'escaped' }, { path: `a/../../${name}`, body: 'escaped' }])
    await rejects(puller.pull(img.ref), 'unsafe_layer', /has a \.\. component/)
    assert.ok(!fs.existsSync(`/tmp/${name}`) && !fs.existsSync(path.join(dir, name)) && !fs.existsSync(path.join(dir, 'layers', name)))
    assertCacheHolds(dir, [])
  })

  test('absolute paths are read inside the layer, never on the host', async () => {
    const { puller } = newPuller()
    const name = marker()
    const img = await hostile([{ path: `/tmp/${name}`, body: 'inside' }, { path: `//etc/${name}/x`, body: 'inside too' }])
    const image = await puller.pull(img.ref)
    const dir = image.layers[0]!.dir
    assert.equal(fs.readFileSync(path.join(dir, 'tmp', name), 'utf8'), 'inside')
    assert.equal(fs.readFileSync(path.join(dir, 'etc', name, 'x'), 'utf8'), 'inside too')
    assert.ok(!fs.existsSync(`/tmp/${name}`) && !fs.existsSync(`/etc/${name}`))
  })

  test('device nodes fail the pull', async () => {
    for (const type of ['CharacterDevice', 'BlockDevice'] as const) {
      const { puller, dir } = newPuller()
      const img = await hostile([{ path: 'dev/', type: 'Directory' }, { path: 'dev/mem', type }])
      await rejects(puller.pull(img.ref), 'unsafe_layer', /"dev\/mem" is a device node/)
      assertCacheHolds(dir, [])
    }
  })

  test('an entry through a symbolic link, or a hard link out of the layer, fails the pull and touches nothing it points at', async () => {
    const outside = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-outside-'))
    caches.push(outside)
    const victim = path.join(outside, 'victim')
    fs.writeFileSync(victim, 'untouched')
    const cases: [TarEntry[], RegExp][] = [
      [[{ path: 'link', type: 'SymbolicLink', linkpath: outside }, { path: 'link/planted', body: 'x' }], /lies under "link", which is not a folder/],
      [[{ path: 'link', type: 'SymbolicLink', linkpath: outside }, { path: 'link/victim', body: 'overwritten' }], /lies under "link"/],
      [[{ path: 'hard', type: 'Link', linkpath: victim }], /hard link to ".*victim", which is not a file earlier in this layer/],
      [[{ path: 'hard', type: 'Link', linkpath: '../../../../../../etc/passwd' }], /has a \.\. component/],
      [[{ path: 'd', type: 'SymbolicLink', linkpath: '/etc' }, { path: 'hard', type: 'Link', linkpath: 'd/passwd' }], /not a file earlier in this layer/],
    ]
    const passwdLinks = fs.statSync('/etc/passwd').nlink
    for (const [entries, why] of cases) {
      const { puller, dir } = newPuller()
      await rejects(puller.pull((await hostile(entries)).ref), 'unsafe_layer', why)
      assertCacheHolds(dir, [])
    }
    assert.deepEqual(fs.readdirSync(outside), ['victim'])
    assert.equal(fs.readFileSync(victim, 'utf8'), 'untouched')
    assert.equal(fs.statSync('/etc/passwd').nlink, passwdLinks)
  })

  test('a layer whose bytes do not match its digest fails the pull, and none of it is left', async () => {
    const { puller, dir } = newPuller()
    const img = await hostile([{ path: 'file', body: 'the real content' }], true)
    // The registry checks digests on push, so the wrong bytes come from the proxy: same length, one byte changed.
    proxy.intercept = (req, res) => {
      if (req.url !== `/v2/${img.name}/blobs/${img.layer}`) return false
      const tar = tarOf([{ path: 'file', body: 'the fake content' }])
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': tar.length })
      res.end(tar)
      return true
    }
    try {
      await rejects(puller.pull(img.ref), 'digest_mismatch', new RegExp(`layer ${img.layer}'s bytes hash to sha256:`))
    } finally {
      proxy.intercept = undefined
    }
    assertCacheHolds(dir, [])
  })

  test('a layer compressed twice is refused (the inner gzip would escape the ceiling on decompressed bytes)', async () => {
    const { puller, dir } = newPuller()
    const inner = gzipLayer(tarOf([{ path: 'f', body: Buffer.alloc(100_000) }])).blob
    const blob = (await import('node:zlib')).gzipSync(inner)
    const name = `hostile/${randomUUID().slice(0, 8)}`
    await pushImage(registry, name, '1', [{ tar: inner, blob, digest: sha256(blob), diffId: sha256(inner), mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip' }])
    await rejects(puller.pull(`${proxy.host}/${name}:1`), 'unsafe_layer', /is compressed twice/)
    assertCacheHolds(dir, [])
  })

  test('a layer past the size ceiling is refused before it is downloaded; one that decompresses past it fails', async () => {
    const img = await hostile([{ path: 'big', body: Buffer.alloc(200_000) }])
    const small = newPuller({ maxLayerBytes: 100 })
    const before = blobGets(img.name)
    await rejects(small.puller.pull(img.ref), 'too_large', /over the 100-byte ceiling/)
    assert.equal(blobGets(img.name) - before, 0, 'not even the config was fetched')
    const bomb = newPuller({ maxUnpackedBytes: 100_000 })
    await rejects(bomb.puller.pull(img.ref), 'too_large', /decompresses to more than 100000 bytes/)
    assertCacheHolds(bomb.dir, [])
  })

  test('a registry that answers garbage, or slowly, or stops mid-layer fails clearly and leaves nothing', async () => {
    const img = await hostile([{ path: 'f', body: 'x'.repeat(10_000) }])
    const blobStart = Buffer.from(await (await fetch(`${registry.url}/v2/${img.name}/blobs/${img.layer}`)).arrayBuffer()).subarray(0, 20)
    const cases: [NonNullable<Proxy['intercept']>, ImagePullReason, RegExp][] = [
      [
        (req, res) => {
          if (!req.url!.includes('/manifests/')) return false
          res.writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json' })
          res.end(Buffer.from([0xff, 0x00, 0x7b, 0x22]))
          return true
        },
        'registry_error',
        /is not JSON/,
      ],
      [
        (req, res) => {
          if (!req.url!.includes('/manifests/')) return false
          res.writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json' })
          res.end(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: { digest: 'nope' }, layers: [{}] }))
          return true
        },
        'registry_error',
        /is not a descriptor/,
      ],
      [(req) => req.url!.includes('/manifests/'), 'unreachable', /did not answer within 300 ms/],
      [
        (req, res) => {
          if (!req.url!.endsWith(img.layer)) return false
          res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': 100_000 })
          res.write(blobStart)
          return true
        },
        'unreachable',
        /sent nothing for 300 ms/,
      ],
      [
        (req, res) => {
          if (!req.url!.includes('/manifests/')) return false
          res.writeHead(500)
          res.end('{"errors":[{"code":"UNKNOWN","message":"<script>"}]}')
          return true
        },
        'registry_error',
        /answered 500 for manifest .* \(UNKNOWN\)$/,
      ],
    ]
    try {
      for (const [intercept, reason, why] of cases) {
        const { puller, dir } = newPuller({ registry: { allowPrivate: ['127.0.0.1/32'], idleTimeoutMs: 300 } })
        proxy.intercept = intercept
        await rejects(puller.pull(img.ref), reason, why)
        assertCacheHolds(dir, [])
      }
    } finally {
      proxy.intercept = undefined
    }
  })
})

describe('registry address policy and credentials', () => {
  test('a loopback registry is refused unless the deployment allows it; other addresses need HTTPS', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-images-'))
    caches.push(dir)
    const refused = imagePuller({ dir, registry: { allowPrivate: [] } })
    await rejects(refused.pull(`${registry.host}/warren/minimal:1`), 'refused_address', /127\.0\.0\.1 is a loopback address; set WARREN_IMAGE_ALLOW_PRIVATE/)
    await rejects(refused.pull('169.254.169.254/latest/meta-data:1'), 'refused_address', /link-local/)
    // Allowed as a private address but not listed for plain HTTP: HTTPS is spoken, which the registry does not.
    const https = imagePuller({ dir, registry: { allowPrivate: ['0.0.0.0/0', '127.0.0.0/8'], resolve: (_h, _o, cb) => cb(null, [{ address: '127.0.0.1', family: 4 }]) } })
    await rejects(https.pull(`registry.test:${registry.host.split(':')[1]}/warren/minimal:1`), 'unreachable', /could not be reached/)
    const listed = imagePuller({ dir, registry: { allowPrivate: ['127.0.0.0/8'], plainHttp: [`registry.test:${registry.host.split(':')[1]}`], resolve: (_h, _o, cb) => cb(null, [{ address: '127.0.0.1', family: 4 }]) } })
    assert.equal((await listed.pull(`registry.test:${registry.host.split(':')[1]}/warren/minimal:1`)).digest, minimalDigest)
  })

  test('redirects: followed to storage elsewhere without the registry\'s authorization, refused to a forbidden address or to plain HTTP', async () => {
    const img = `${proxy.host}/warren/minimal:1`
    const seenDirect: string[] = []
    // "Storage": the registry itself on its own port, reached by a redirect from the proxy's blob answers.
    const storage = await startProxy(registry)
    storage.intercept = (req) => {
      seenDirect.push(String(req.headers.authorization ?? ''))
      return false
    }
    const redirectTo = (target: (url: string) => string) => (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => {
      if (!req.url!.includes('/blobs/')) return req.headers.authorization !== 'Bearer t' ? (res.writeHead(401, { 'www-authenticate': 'Basic realm="x"' }).end(), true) : false
      res.writeHead(307, { location: target(req.url!) })
      res.end()
      return true
    }
    try {
      proxy.intercept = redirectTo((url) => `http://${storage.host}${url}`)
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-images-'))
      caches.push(dir)
      const creds = { credentials: () => ({ basic: () => 'Bearer t' }) as unknown as RegistryCredentials }
      const image = await imagePuller({ dir, registry: { allowPrivate: ['127.0.0.1/32'], ...creds } }).pull(img)
      assert.equal(image.digest, minimalDigest)
      assert.ok(seenDirect.length >= 3 && seenDirect.every((a) => a === ''), 'storage on another origin never sees the registry\'s authorization')
      proxy.intercept = redirectTo(() => 'https://169.254.169.254/latest/meta-data/')
      await rejects(newPuller({ registry: { allowPrivate: ['127.0.0.1/32'], ...creds } }).puller.pull(img), 'refused_address', /link-local/)
      proxy.intercept = redirectTo((url) => `http://storage.example.com${url}`)
      await rejects(newPuller({ registry: { allowPrivate: ['127.0.0.1/32'], ...creds } }).puller.pull(img), 'refused_address', /redirected .* to plain HTTP at storage\.example\.com/)
    } finally {
      proxy.intercept = undefined
      await storage.stop()
    }
  })

  test('a caller that gives up (its signal aborts) stops waiting; the shared pull goes on for the others', async () => {
    const { puller } = newPuller()
    const ac = new AbortController()
    const given = puller.pull(`${proxy.host}/warren/minimal:1`, { signal: ac.signal })
    const other = puller.pull(`${proxy.host}/warren/minimal:1`)
    ac.abort(new Error('caller left'))
    await assert.rejects(given, /caller left/)
    assert.equal((await other).digest, minimalDigest)
  })

  test('over HTTPS the certificate is checked: refused when nothing trusts it, pulled when its CA is given', async () => {
    const cert = makeTestCert()
    const tlsProxy = await startProxy(registry, { cert: cert.cert, key: cert.key })
    try {
      // "vm" is in the certificate, and not a loopback name: reached over HTTPS.
      const ref = `vm:${tlsProxy.host.split(':')[1]}/warren/minimal:1`
      const registryOpts = { allowPrivate: ['127.0.0.0/8'], resolve: ((_h, _o, cb) => cb(null, [{ address: '127.0.0.1', family: 4 }])) as Resolver }
      await rejects(newPuller({ registry: registryOpts }).puller.pull(ref), 'unreachable', /registry vm:\d+ could not be reached: (SELF_SIGNED|DEPTH_ZERO)/)
      assert.equal((await newPuller({ registry: { ...registryOpts, ca: cert.cert } }).puller.pull(ref)).digest, minimalDigest)
      assert.ok(tlsProxy.count(/^GET \/v2\/warren\/minimal\/blobs\//) >= 3, 'the blobs came over HTTPS')
    } finally {
      await tlsProxy.stop()
      cert.remove()
    }
  })

  test('the configured puller: its cache under the data folder, loopback registries only when WARREN_IMAGE_ALLOW_PRIVATE covers them', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-data-'))
    caches.push(dataDir)
    await rejects(configuredImagePuller(loadConfig({ WARREN_DATA_DIR: dataDir })).pull(`${registry.host}/warren/minimal:1`), 'refused_address', /loopback/)
    const image = await configuredImagePuller(loadConfig({ WARREN_DATA_DIR: dataDir, WARREN_IMAGE_ALLOW_PRIVATE: '127.0.0.1/32' })).pull(`${registry.host}/warren/minimal:1`)
    assert.ok(image.layers.every((l) => l.dir.startsWith(path.join(dataDir, 'images', 'layers') + path.sep) && fs.existsSync(l.dir)))
    assert.equal(fs.statSync(path.join(dataDir, 'images')).mode & 0o777, 0o700, 'the cache is the service\'s alone: layers keep setuid files')
  })

  test('a registry that asks for a password (docker-registry\'s htpasswd, Basic): pulled with it, refused without or with a wrong one, the password in no message', async () => {
    const password = `pw-${randomUUID()}`
    const locked = await startRegistry({ auth: { user: 'warren', password } })
    try {
      await pushMinimalImage(locked, 'warren/minimal', '1', `warren:${password}`)
      const ref = `${locked.host}/warren/minimal:1`
      const withCreds = (creds?: RegistryCredentials) => newPuller({ registry: { allowPrivate: ['127.0.0.1/32'], credentials: (r) => (r === locked.host ? creds : undefined) } })
      assert.equal((await withCreds(new RegistryCredentials('warren', password)).puller.pull(ref)).digest, minimalDigest)
      const none = await rejects(withCreds().puller.pull(ref), 'unauthorized', new RegExp(`registry ${locked.host} wants credentials for warren/minimal and none are configured`))
      const wrong = newPuller({ registry: { allowPrivate: ['127.0.0.1/32'], credentials: () => new RegistryCredentials('warren', `${password}x`) } })
      const refused = await rejects(wrong.puller.pull(ref), 'unauthorized', new RegExp(`registry ${locked.host} refused access to warren/minimal`))
      assertCacheHolds(wrong.dir, [])
      for (const err of [none, refused]) assert.ok(!`${err.message}${err.stack}`.includes(password))
    } finally {
      await locked.stop()
    }
  })

  test('a bearer-token registry: credentials go to its token server, a refusal is unauthorized, the password appears nowhere', async () => {
    const secret = `pw-${randomUUID()}`
    const token = `tok-${randomUUID()}`
    const seen: string[] = []
    proxy.intercept = (req, res) => {
      seen.push(`${req.url} ${req.headers.authorization ?? ''}`)
      if (req.url!.startsWith('/token')) {
        const ok = req.headers.authorization === new RegistryCredentials('warren', secret).basic() && new URL(req.url!, 'http://x').searchParams.get('scope') === 'repository:warren/minimal:pull'
        res.writeHead(ok ? 200 : 401, { 'content-type': 'application/json' })
        res.end(ok ? JSON.stringify({ token }) : '{}')
        return true
      }
      if (req.headers.authorization === `Bearer ${token}`) return false
      res.writeHead(401, { 'www-authenticate': `Bearer realm="http://${proxy.host}/token",service="test",scope="repository:warren/minimal:pull"` })
      res.end()
      return true
    }
    try {
      const creds = new RegistryCredentials('warren', secret)
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-images-'))
      caches.push(dir)
      const options = { dir, registry: { allowPrivate: ['127.0.0.1/32'], credentials: () => creds } }
      const image = await imagePuller(options).pull(`${proxy.host}/warren/minimal:1`)
      assert.equal(image.digest, minimalDigest)
      assert.ok(seen.some((s) => s.startsWith('/token') && s.includes('Basic ')), 'the token server got the credentials')
      assert.ok(seen.filter((s) => s.startsWith('/v2/warren')).every((s) => !s.includes('Basic ')), 'the registry got tokens, not the password')
      const wrong = imagePuller({ ...options, registry: { ...options.registry, credentials: () => new RegistryCredentials('warren', 'wrong') } })
      const err = await rejects(wrong.pull(`${proxy.host}/warren/minimal:nope`), 'unauthorized', /refused the credentials for warren\/minimal/)
      const anonymous = imagePuller({ dir, registry: { allowPrivate: ['127.0.0.1/32'] } })
      await rejects(anonymous.pull(`${proxy.host}/warren/minimal:1`), 'unauthorized', /refused an anonymous pull/)
      for (const shown of [JSON.stringify(options), String(creds), err.message, err.stack ?? '', (await import('node:util')).inspect(options, { depth: 5 })]) assert.ok(!shown.includes(secret), shown)
    } finally {
      proxy.intercept = undefined
    }
  })
})
