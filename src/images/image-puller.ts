import { randomUUID } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type { Config } from '../config.ts'
import { limiter } from '../shared/limiter.ts'
import { logFailure, silentLog, type Log } from '../shared/log.ts'
import type { ImageMetrics } from '../shared/metrics.ts'
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../shared/private-data-dir.ts'
import { ImageReferenceError, parseImageReference, type ImageReference } from './image-reference.ts'
import { ImagePullError } from './image-pull-error.ts'
import { hostPlatform, parseConfig, parseManifest, selectPlatform, type Descriptor, type ImageConfig, type Platform } from './oci-manifest.ts'
import { MAX_MANIFEST_BYTES, readLimited, registryClient, sha256, type RegistryClient, type RegistryOptions } from './registry-client.ts'
import { unpackLayer } from './unpack-layer.ts'
import { cacheUsage, diskUsage } from './cache-usage.ts'

/**
 * Pulls OCI images into a per-node cache that every workspace on an image shares.
 *
 * `pull(ref)` parses the reference, resolves it at the registry to a manifest (an index resolves
 * to the manifest for this host's platform), fetches the config and then every layer not already
 * in the cache, each streamed through its digest check into a temporary folder and renamed into
 * place only once it is whole and verified: a layer folder in the cache is always complete, and
 * a failed pull leaves nothing behind but what it finished. Layers are keyed by their (compressed)
 * digest, so two images that share a layer share its folder, and two pulls of one image or one
 * layer at the same time make one download. What the registry sends is hostile input throughout:
 * sizes are capped, digests checked, tar entries confined (see LayerWriter).
 *
 * The answer is what the sandbox mounts: the resolved digest (a session records it, so a node
 * taking the session over pulls exactly this image with `ref@digest`), the config (Env,
 * WorkingDir, User...) and the layers' folders, lowest first, in the form overlayfs takes as
 * lower folders (whiteouts as 0/0 character devices, opaque folders by xattr).
 *
 * Cache layout under `dir` (the service's alone, 0700: layers keep their setuid files and owners):
 * `layers/<hex>/` one folder per layer, `configs/<hex>.json`, `used/<hex>` each layer's last use
 * and size (see cache-usage.ts), `tmp/` work in progress and layers being removed (emptied when
 * the puller is made, since nothing else writes there).
 *
 * Bounded: what a pulled image's caller holds (until it calls `release`) and what a pull under way
 * needs is never removed; a layer or config no one has used for `keepMs` is, by the sweep that
 * `startSweeping` runs now and then.
 */

export type ImagePullerOptions = {
  /** The cache folder: `<data dir>/images`. */
  dir: string
  registry: RegistryOptions
  /** Most bytes one layer's download may be (its descriptor's size is checked first). Default 4 GiB. */
  maxLayerBytes?: number
  /** Most bytes one layer may decompress to. Default 16 GiB. */
  maxUnpackedBytes?: number
  /** The platform an index resolves to; default this host's. */
  platform?: Platform
  /** Most layers downloaded and unpacked at once on this node, whatever the images (Docker's default: 3). */
  maxConcurrentLayers?: number
  /** How long a layer or config no one uses stays in the cache; 0 (the default): for ever. */
  keepMs?: number
  /** The clock last use is told by (tests move it on). */
  now?: () => number
  /** Counts pulls, hits and bytes, and reads the cache's size at each scrape. */
  metrics?: ImageMetrics
  /** Where a failed sweep is told (the next one tries again). */
  log?: Log
}

export type PullProgress = {
  ref: string
  /** Compressed bytes of the image's layers in the cache or received so far. */
  bytes: number
  totalBytes: number
  layers: number
  /** Layers not yet in the cache. */
  layersLeft: number
}

export type PulledLayer = {
  digest: string
  /** The uncompressed tar's digest (the config's diff_id). */
  diffId: string
  size: number
  /** The unpacked layer: an overlay lower folder. */
  dir: string
  /** Whether this pull found it missing from the cache (and so downloaded it, or waited for the pull that did). */
  fetched: boolean
}

/** How often the sweep looks for layers unused for the keep time (and at most a quarter of it). */
const SWEEP_EVERY_MS = 10 * 60_000

export type PulledImage = {
  /** The reference as given, spelled out (`registry/repository[:tag][@digest]`). */
  ref: string
  /** What the reference resolved to at the registry: the index's digest for a multi-platform image. */
  digest: string
  /** The manifest of this host's platform (the same as `digest` for a single-platform image). */
  manifestDigest: string
  configDigest: string
  config: ImageConfig
  /** Lowest first. */
  layers: PulledLayer[]
  /**
   * Lets go of the layers and config: until then no sweep removes them (a sandbox holds them as
   * long as it runs). Their keep time counts from here. Idempotent.
   */
  release(): void
}

export type PullOptions = { onProgress?: (p: PullProgress) => void; signal?: AbortSignal }

export type ImagePuller = {
  pull(ref: string, opts?: PullOptions): Promise<PulledImage>
  /** The folder a layer is unpacked into, whether or not it is there yet. */
  layerDir(digest: string): string
  /** Removes what no one has used for the keep time (nothing when it is 0); resolves the layers removed. One at a time. */
  sweep(): Promise<string[]>
  /**
   * Sweeps now and then from now on (once this node's cache is its own: the node has joined; a
   * node refused for sharing the data folder must not sweep a live one's cache).
   */
  startSweeping(): void
  /** Stops sweeping, after the sweep under way. */
  close(): Promise<void>
}

const hex = (digest: string) => digest.slice('sha256:'.length)

/** Waits for `p`, or rejects with the signal's reason when it aborts first (the shared work goes on for others). */
function until<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p
  signal.throwIfAborted()
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
  })
}

export function imagePuller(opts: ImagePullerOptions): ImagePuller {
  const maxLayerBytes = opts.maxLayerBytes ?? 4 * 1024 ** 3
  const maxUnpackedBytes = opts.maxUnpackedBytes ?? 16 * 1024 ** 3
  const platform = opts.platform ?? hostPlatform()
  const client: RegistryClient = registryClient(opts.registry)
  // Each layer in flight is a connection, a worker thread and a stream of writes: a 50-layer image must not start 50.
  const downloads = limiter(opts.maxConcurrentLayers ?? 3)
  const keepMs = opts.keepMs ?? 0
  const metrics = opts.metrics
  const dirs = { layers: path.join(opts.dir, 'layers'), configs: path.join(opts.dir, 'configs'), tmp: path.join(opts.dir, 'tmp'), used: path.join(opts.dir, 'used') }
  fs.mkdirSync(opts.dir, { recursive: true, mode: PRIVATE_DIR_MODE })
  fs.chmodSync(opts.dir, PRIVATE_DIR_MODE)
  // What a pull interrupted by a crash left half done: never renamed into place, so never used.
  fs.rmSync(dirs.tmp, { recursive: true, force: true })
  for (const d of Object.values(dirs)) fs.mkdirSync(d, { recursive: true, mode: PRIVATE_DIR_MODE })

  const usage = cacheUsage(dirs, opts.now ?? Date.now)
  metrics?.countCacheWith(() => usage.stats())
  const layerDir = (digest: string) => path.join(dirs.layers, hex(digest))
  /** Downloads in flight by layer digest; each reports its bytes to everyone waiting on it. */
  const layerPulls = new Map<string, { done: Promise<void>; listeners: Set<(n: number) => void> }>()
  /** Whole pulls in flight by reference. */
  const imagePulls = new Map<string, SharedPull>()
  let sweeping: Promise<string[]> | null = null
  let timer: NodeJS.Timeout | null = null

  function tmpDir(digest: string): string {
    const dir = path.join(dirs.tmp, `${hex(digest).slice(0, 16)}-${randomUUID()}`)
    fs.mkdirSync(dir, { mode: PRIVATE_DIR_MODE })
    return dir
  }

  async function fetchConfig(ref: ImageReference, d: Descriptor): Promise<ImageConfig> {
    const file = path.join(dirs.configs, `${hex(d.digest)}.json`)
    const cached = fs.existsSync(file) ? fs.readFileSync(file) : undefined
    if (cached) return parseConfig(cached, `config ${d.digest}`)
    if (d.size > MAX_MANIFEST_BYTES) throw new ImagePullError('too_large', `config ${d.digest} is ${d.size} bytes, over the ${MAX_MANIFEST_BYTES}-byte ceiling`)
    const bytes = await readLimited(await client.blob(ref, d.digest), Math.min(d.size, MAX_MANIFEST_BYTES), `config ${d.digest}`)
    if (sha256(bytes) !== d.digest) throw new ImagePullError('digest_mismatch', `config ${d.digest}'s bytes hash to ${sha256(bytes)}`)
    const config = parseConfig(bytes, `config ${d.digest}`)
    const tmp = path.join(dirs.tmp, `config-${randomUUID()}`)
    fs.writeFileSync(tmp, bytes, { mode: PRIVATE_FILE_MODE })
    fs.renameSync(tmp, file)
    usage.recordConfig(d.digest, bytes.length)
    return config
  }

  /** One layer into the cache, shared with any pull of it already under way. */
  function ensureLayer(ref: ImageReference, layer: Descriptor, diffId: string, onBytes: (n: number) => void): Promise<void> {
    let pull = layerPulls.get(layer.digest)
    if (!pull && fs.existsSync(layerDir(layer.digest))) return Promise.resolve()
    if (!pull) {
      const listeners = new Set<(n: number) => void>()
      const done = downloads(async () => {
        const work = tmpDir(layer.digest)
        try {
          const body = await client.blob(ref, layer.digest)
          await unpackLayer(body, {
            dir: work,
            layer,
            diffId,
            maxUnpackedBytes,
            onBytes: (n) => {
              metrics?.downloadedBytes.inc(n)
              listeners.forEach((l) => l(n))
            },
          })
          const bytes = await diskUsage(work)
          try {
            fs.renameSync(work, layerDir(layer.digest))
          } catch (err) {
            // Another process sharing the cache finished it first: its folder is as good as ours.
            if ((err as NodeJS.ErrnoException).code !== 'ENOTEMPTY' && (err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
          }
          // After the rename, in the same stretch (a crash between leaves a layer the sweep adopts).
          usage.recordLayer(layer.digest, bytes)
        } finally {
          // Not rmSync: a failed layer may be thousands of files, and this is the service's event loop.
          await fs.promises.rm(work, { recursive: true, force: true })
        }
      }).finally(() => layerPulls.delete(layer.digest))
      pull = { done, listeners }
      layerPulls.set(layer.digest, pull)
    }
    pull.listeners.add(onBytes)
    return pull.done.finally(() => pull.listeners.delete(onBytes))
  }

  /** `taken`: called with the image's config and layer digests as soon as they are known, before the cache is looked in. */
  async function pullOnce(ref: ImageReference, progress: (p: PullProgress) => void, taken: (digests: string[]) => void): Promise<Omit<PulledImage, 'release'>> {
    const top = await client.manifest(ref, ref.digest ?? ref.tag!)
    let manifestDigest = top.digest
    let doc = parseManifest(top.bytes, top.mediaType, `manifest of ${ref.canonical}`)
    if (doc.kind === 'index') {
      const chosen = selectPlatform(doc, platform, `index of ${ref.canonical}`)
      const child = await client.manifest(ref, chosen.digest)
      manifestDigest = child.digest
      doc = parseManifest(child.bytes, child.mediaType, `manifest ${chosen.digest} of ${ref.canonical}`)
      if (doc.kind === 'index') throw new ImagePullError('unsupported', `index of ${ref.canonical} names another index for ${platform.os}/${platform.architecture}`)
    }
    for (const l of doc.layers) {
      if (l.size > maxLayerBytes) throw new ImagePullError('too_large', `layer ${l.digest} of ${ref.canonical} is ${l.size} bytes, over the ${maxLayerBytes}-byte ceiling`)
    }
    // Held before the cache is looked in, in the same stretch: no sweep removes what is found there.
    const digests = [doc.config.digest, ...doc.layers.map((l) => l.digest)]
    taken(digests)
    usage.touch(digests)
    const config = await fetchConfig(ref, doc.config)
    if (config.diffIds.length !== doc.layers.length) throw new ImagePullError('registry_error', `config of ${ref.canonical} lists ${config.diffIds.length} layers, its manifest ${doc.layers.length}`)
    if ((config.os && config.os !== platform.os) || (config.architecture && config.architecture !== platform.architecture)) {
      throw new ImagePullError('unsupported', `${ref.canonical} is an image for ${config.os}/${config.architecture}, not ${platform.os}/${platform.architecture}`)
    }
    const layers = doc.layers.map((l, i) => ({ digest: l.digest, diffId: config.diffIds[i]!, size: l.size, dir: layerDir(l.digest), fetched: !fs.existsSync(layerDir(l.digest)) }))
    const totalBytes = layers.reduce((n, l) => n + l.size, 0)
    let bytes = layers.filter((l) => !l.fetched).reduce((n, l) => n + l.size, 0)
    let layersLeft = layers.filter((l) => l.fetched).length
    const report = () => progress({ ref: ref.canonical, bytes, totalBytes, layers: layers.length, layersLeft })
    report()
    // Every missing layer at once: a registry serves them in parallel, and each is its own stream.
    await Promise.all(
      doc.layers.map(async (l, i) => {
        if (!layers[i]!.fetched) return
        await ensureLayer(ref, l, layers[i]!.diffId, (n) => {
          bytes += n
          report()
        })
        layersLeft--
        report()
      }),
    )
    return { ref: ref.canonical, digest: top.digest, manifestDigest, configDigest: doc.config.digest, config, layers }
  }

  /** One pull under way, shared by every caller of the same reference; each caller holds the image for itself. */
  function sharedPull(ref: ImageReference): SharedPull {
    const listeners = new Set<(p: PullProgress) => void>()
    const holders = new Set<Holder>()
    const shared: SharedPull = {
      listeners,
      holders,
      digests: null,
      done: pullOnce(ref, (p) => listeners.forEach((l) => l(p)), (digests) => {
        shared.digests = digests
        for (const h of holders) h.release ??= usage.hold(digests)
      }).finally(() => imagePulls.delete(ref.canonical)),
    }
    // Each caller's await reports a failure; this one only keeps it from being unhandled.
    shared.done.catch(() => {})
    return shared
  }

  async function pull(input: string, pullOpts: PullOptions): Promise<PulledImage> {
    let ref: ImageReference
    try {
      ref = parseImageReference(input)
    } catch (err) {
      if (err instanceof ImageReferenceError) throw new ImagePullError('malformed_reference', err.message)
      throw err
    }
    let shared = imagePulls.get(ref.canonical)
    if (!shared) {
      shared = sharedPull(ref)
      imagePulls.set(ref.canonical, shared)
    }
    const holder: Holder = { release: null }
    // Joining a pull that knows its digests already: held from now (it may be about to finish).
    if (shared.digests) holder.release = usage.hold(shared.digests)
    shared.holders.add(holder)
    const listener = pullOpts.onProgress
    if (listener) shared.listeners.add(listener)
    try {
      const image = await until(shared.done, pullOpts.signal)
      return { ...image, release: holder.release ?? (() => {}) }
    } catch (err) {
      holder.release?.()
      throw err
    } finally {
      shared.holders.delete(holder)
      if (listener) shared.listeners.delete(listener)
    }
  }

  function sweep(): Promise<string[]> {
    if (keepMs === 0) return Promise.resolve([])
    sweeping ??= usage
      .sweep(keepMs, (digest) => layerPulls.has(digest))
      .then((removed) => {
        metrics?.layersRemoved.inc(removed.length)
        return removed
      })
      .finally(() => (sweeping = null))
    return sweeping
  }

  return {
    layerDir,
    async pull(input, pullOpts = {}) {
      metrics?.pullsStarted.inc()
      try {
        const image = await pull(input, pullOpts)
        metrics?.pullsSettled.inc({ outcome: 'succeeded' })
        if (image.layers.every((l) => !l.fetched)) metrics?.cacheHits.inc()
        return image
      } catch (err) {
        metrics?.pullsSettled.inc({ outcome: 'failed' })
        throw err
      }
    },
    sweep,
    startSweeping() {
      if (keepMs === 0 || timer) return
      const run = () => void sweep().catch(logFailure(opts.log ?? silentLog, 'sweeping the image cache failed', { component: 'images' }))
      run()
      timer = setInterval(run, Math.max(1000, Math.min(SWEEP_EVERY_MS, keepMs / 4)))
      timer.unref()
    },
    async close() {
      if (timer) clearInterval(timer)
      timer = null
      // Its failure was logged where it was started.
      await sweeping?.catch(() => {})
    },
  }
}

/** A caller's hold on the image it waits for: taken when the digests are known (or at once, joining late). */
type Holder = { release: (() => void) | null }

type SharedPull = {
  done: Promise<Omit<PulledImage, 'release'>>
  listeners: Set<(p: PullProgress) => void>
  /** The config's and layers' digests, once the manifest said them. */
  digests: string[] | null
  holders: Set<Holder>
}

/** The puller a node's settings ask for: its cache in `<data dir>/images`, registries reached as the deployment allows. */
export function configuredImagePuller(config: Pick<Config, 'dataDir' | 'imageAllowPrivate' | 'imagePlainHttp' | 'imageMaxLayerMb' | 'imageKeepHours'>, metrics?: ImageMetrics, log?: Log): ImagePuller {
  return imagePuller({
    dir: path.join(config.dataDir, 'images'),
    registry: { allowPrivate: config.imageAllowPrivate, plainHttp: config.imagePlainHttp },
    maxLayerBytes: config.imageMaxLayerMb * 1024 * 1024,
    keepMs: config.imageKeepHours * 3_600_000,
    ...(metrics ? { metrics } : {}),
    ...(log ? { log } : {}),
  })
}
