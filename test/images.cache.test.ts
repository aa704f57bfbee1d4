import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, mock, test } from 'node:test'
import { imagePuller, type ImagePuller, type ImagePullerOptions } from '../src/images/image-puller.ts'
import { createMetrics, type Metrics } from '../src/shared/metrics.ts'
import { gzipLayer, listTree, pushImage, startRegistry, tarOf, type BuiltLayer, type Registry } from './registry.ts'

// The node's image cache kept observable and bounded: its metrics, and the sweep that removes
// what no one has used for the keep time, against a real registry on loopback. Two small
// hand-made images share a base layer: A = base + a, B = base + b.

const HOUR = 3_600_000
let registry: Registry
let A: string
let B: string
const layer = (name: string): BuiltLayer => gzipLayer(tarOf([{ path: `${name}/`, type: 'Directory' }, { path: `${name}/file`, body: `${name} `.repeat(3000) }, { path: `${name}/link`, type: 'Link', linkpath: `${name}/file` }]))
const base = layer('base')
const onlyA = layer('only-a')
const onlyB = layer('only-b')
const caches: string[] = []
/** The clock every puller here tells last use by: a test moves it on instead of waiting. */
let clock = Date.UTC(2026, 0, 1)

function newPuller(dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-image-cache-')), extra: Partial<ImagePullerOptions> = {}): { puller: ImagePuller; dir: string } {
  caches.push(dir)
  return { puller: imagePuller({ dir, registry: { allowPrivate: ['127.0.0.1/32'] }, keepMs: HOUR, now: () => clock, ...extra }), dir }
}

const hexes = (...ls: BuiltLayer[]) => ls.map((l) => l.digest.slice(7)).sort()
const cached = (dir: string) => fs.readdirSync(path.join(dir, 'layers')).sort()
/** A layer in the cache, whole: its three entries, the file's bytes as pushed. */
function assertWhole(dir: string, l: BuiltLayer, name: string): void {
  const at = path.join(dir, 'layers', l.digest.slice(7))
  assert.deepEqual(listTree(at), [name, `${name}/file`, `${name}/link`])
  assert.equal(fs.readFileSync(path.join(at, name, 'file'), 'utf8'), `${name} `.repeat(3000))
}

before(async () => {
  registry = await startRegistry()
  await pushImage(registry, 'cache/a', '1', [base, onlyA])
  await pushImage(registry, 'cache/b', '1', [base, onlyB])
  A = `${registry.host}/cache/a:1`
  B = `${registry.host}/cache/b:1`
})

after(async () => {
  await registry?.stop()
  for (const dir of caches) fs.rmSync(dir, { recursive: true, force: true })
})

/** One sample's value from the metrics' exposition, and that the series has its HELP line. */
async function sample(m: Metrics, name: string, labels = ''): Promise<number> {
  const text = await m.text()
  assert.match(text, new RegExp(`^# HELP ${name} \\S`, 'm'), `${name} has HELP text`)
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `))
  assert.ok(line, `${name}${labels} is in the exposition`)
  return Number(line.split(' ')[1])
}

test('metrics count pulls started and settled, cache hits, bytes downloaded, and the cache on disk', async () => {
  const metrics = createMetrics({ countDeliveries: async () => 0, earliestPendingDue: async () => null })
  const { puller, dir } = newPuller(undefined, { metrics: metrics.images })
  assert.equal(await sample(metrics, 'warren_image_cache_layers'), 0)
  const first = await puller.pull(A)
  first.release()
  assert.equal(await sample(metrics, 'warren_image_pulls_started_total'), 1)
  assert.equal(await sample(metrics, 'warren_image_pulls_settled_total', '{outcome="succeeded"}'), 1)
  assert.equal(await sample(metrics, 'warren_image_cache_hits_total'), 0, 'the first pull downloaded its layers')
  assert.equal(await sample(metrics, 'warren_image_downloaded_bytes_total'), base.blob.length + onlyA.blob.length)
  assert.equal(await sample(metrics, 'warren_image_cache_layers'), 2)
  // What du says the layers take (a hard link once), and the config file's bytes.
  const du = first.layers.reduce((n, l) => n + Number(execFileSync('du', ['-s', '-B1', '--', l.dir], { encoding: 'utf8' }).split('\t')[0]), 0)
  const configs = fs.readdirSync(path.join(dir, 'configs')).reduce((n, f) => n + fs.statSync(path.join(dir, 'configs', f)).size, 0)
  assert.equal(await sample(metrics, 'warren_image_cache_bytes'), du + configs)

  // Again: served from the cache, nothing downloaded.
  ;(await puller.pull(A)).release()
  assert.equal(await sample(metrics, 'warren_image_cache_hits_total'), 1)
  assert.equal(await sample(metrics, 'warren_image_downloaded_bytes_total'), base.blob.length + onlyA.blob.length)
  // B shares the base layer but downloads its own: not a hit.
  ;(await puller.pull(B)).release()
  assert.equal(await sample(metrics, 'warren_image_cache_hits_total'), 1)
  assert.equal(await sample(metrics, 'warren_image_downloaded_bytes_total'), base.blob.length + onlyA.blob.length + onlyB.blob.length)
  assert.equal(await sample(metrics, 'warren_image_cache_layers'), 3)
  await assert.rejects(puller.pull(`${registry.host}/cache/a:nope`))
  assert.equal(await sample(metrics, 'warren_image_pulls_started_total'), 4)
  assert.equal(await sample(metrics, 'warren_image_pulls_settled_total', '{outcome="succeeded"}'), 3)
  assert.equal(await sample(metrics, 'warren_image_pulls_settled_total', '{outcome="failed"}'), 1)

  // Unused past the keep time: swept, and the gauges say so.
  clock += 2 * HOUR
  assert.equal((await puller.sweep()).length, 3)
  assert.equal(await sample(metrics, 'warren_image_layers_removed_total'), 3)
  assert.equal(await sample(metrics, 'warren_image_cache_layers'), 0)
  assert.equal(await sample(metrics, 'warren_image_cache_bytes'), 0)
})

describe('the sweep', () => {
  test('removes what no one used for the keep time, never what is held, and tells last use across a restart', async () => {
    const { puller, dir } = newPuller()
    const a = await puller.pull(A)
    ;(await puller.pull(B)).release()
    assert.deepEqual(cached(dir), hexes(base, onlyA, onlyB))
    clock += 2 * HOUR
    // A is held (a sandbox runs on it): its layers, the base B shares among them, and its config stay.
    assert.deepEqual(await puller.sweep(), [onlyB.digest])
    assert.deepEqual(cached(dir), hexes(base, onlyA))
    assert.deepEqual(fs.readdirSync(path.join(dir, 'configs')), [`${a.configDigest.slice(7)}.json`], "B's config went too")
    assert.deepEqual(fs.readdirSync(path.join(dir, 'used')).sort(), hexes(base, onlyA))
    assert.deepEqual(listTree(path.join(dir, 'tmp')), [], 'nothing half removed is left')

    // Released now: its keep time starts here, not at the pull two hours ago.
    a.release()
    clock += HOUR / 2
    assert.deepEqual(await puller.sweep(), [])
    // A restart reads last use from the disk: still recent...
    await puller.close()
    const again = newPuller(dir).puller
    assert.deepEqual(await again.sweep(), [])
    assert.deepEqual(cached(dir), hexes(base, onlyA))
    // ...and old once the keep time has passed.
    clock += HOUR
    assert.deepEqual((await again.sweep()).sort(), [base.digest, onlyA.digest].sort())
    assert.deepEqual([cached(dir), fs.readdirSync(path.join(dir, 'configs')), fs.readdirSync(path.join(dir, 'used')), listTree(path.join(dir, 'tmp'))], [[], [], [], []])
  })

  test('a sweep that runs while a pull finds its layers in the cache leaves them to it', async () => {
    const { puller, dir } = newPuller()
    ;(await puller.pull(A)).release()
    clock += 2 * HOUR
    // The first progress is reported right after the pull has looked in the cache and found every
    // layer there: the sweep starts at that very moment, with the keep time over since (as a short
    // one would be), and again once the pull has returned.
    const sweeps: Promise<string[]>[] = []
    const image = await puller.pull(A, {
      onProgress: () => {
        clock += 2 * HOUR
        sweeps.push(puller.sweep())
      },
    })
    clock += 2 * HOUR
    sweeps.push(puller.sweep())
    assert.deepEqual(image.layers.map((l) => l.fetched), [false, false], 'a cache hit')
    assert.deepEqual((await Promise.all(sweeps)).flat(), [])
    assertWhole(dir, base, 'base')
    assertWhole(dir, onlyA, 'only-a')
    image.release()
    clock += 2 * HOUR
    assert.equal((await puller.sweep()).length, 2)
  })

  test('a caller that joins a pull already under way is held from then on, the first caller letting go changing nothing', async () => {
    const { puller, dir } = newPuller()
    // The first progress comes once the manifest has named the digests: the second caller joins
    // then, the shared pull past the point where holders were taken when it was told them.
    let joined: ReturnType<ImagePuller['pull']> | undefined
    const first = await puller.pull(A, { onProgress: () => void (joined ??= puller.pull(A)) })
    assert.ok(joined, 'control: the second caller joined while the first pull ran')
    const second = await joined
    first.release()
    clock += 2 * HOUR
    assert.deepEqual(await puller.sweep(), [], 'the second caller still holds every layer')
    assertWhole(dir, base, 'base')
    assertWhole(dir, onlyA, 'only-a')
    second.release()
    clock += 2 * HOUR
    assert.equal((await puller.sweep()).length, 2)
  })

  test('a crash in the middle of a removal leaves no layer that looks whole; a layer without a record is adopted, not removed', async () => {
    const { puller, dir } = newPuller()
    ;(await puller.pull(B)).release()
    clock += 2 * HOUR
    // The deletion dies after its first file, as a crash would leave it.
    const rm = mock.method(fs.promises, 'rm', async (p: fs.PathLike) => {
      const file = listTree(String(p)).map((f) => path.join(String(p), f)).find((f) => fs.lstatSync(f).isFile())
      if (file) fs.unlinkSync(file)
      throw new Error('the service died here')
    })
    try {
      await assert.rejects(puller.sweep(), /the service died here/)
    } finally {
      rm.mock.restore()
    }
    assert.deepEqual(cached(dir), hexes(base), 'the half-deleted layer is not in layers/')
    // The base layer's record lost as well (a cache from before records, or a crash before one was written).
    fs.rmSync(path.join(dir, 'used', base.digest.slice(7)))

    // After the restart: the half-deleted remains are gone, the unrecorded layer is kept and counted...
    const metrics = createMetrics({ countDeliveries: async () => 0, earliestPendingDue: async () => null })
    const again = newPuller(dir, { metrics: metrics.images }).puller
    assert.deepEqual(listTree(path.join(dir, 'tmp')), [])
    assert.deepEqual(await again.sweep(), [], 'a layer with no record is not taken for unused')
    assert.deepEqual(cached(dir), hexes(base))
    assert.equal(await sample(metrics, 'warren_image_cache_layers'), 1)
    // ...and the image comes back whole: the removed layer downloaded again, the base found.
    const image = await again.pull(B)
    assert.deepEqual(image.layers.map((l) => l.fetched), [false, true])
    assertWhole(dir, base, 'base')
    assertWhole(dir, onlyB, 'only-b')
    image.release()
    // The adopted layer's keep time started when it was adopted.
    clock += 2 * HOUR
    assert.equal((await again.sweep()).length, 2)
  })
})
