import { randomUUID } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type { Config } from '../config.ts'
import { limiter } from '../shared/limiter.ts'
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../shared/private-data-dir.ts'
import { ImageReferenceError, parseImageReference, type ImageReference } from './image-reference.ts'
import { ImagePullError } from './image-pull-error.ts'
import { hostPlatform, parseConfig, parseManifest, selectPlatform, type Descriptor, type ImageConfig, type Platform } from './oci-manifest.ts'
import { MAX_MANIFEST_BYTES, readLimited, registryClient, sha256, type RegistryClient, type RegistryOptions } from './registry-client.ts'
import { unpackLayer } from './unpack-layer.ts'

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
 * `layers/<hex>/` one folder per layer, `configs/<hex>.json`, `tmp/` work in progress (emptied
 * when the puller is made, since nothing else writes there).
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
}

export type PullOptions = { onProgress?: (p: PullProgress) => void; signal?: AbortSignal }

export type ImagePuller = {
  pull(ref: string, opts?: PullOptions): Promise<PulledImage>
  /** The folder a layer is unpacked into, whether or not it is there yet. */
  layerDir(digest: string): string
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
  const dirs = { layers: path.join(opts.dir, 'layers'), configs: path.join(opts.dir, 'configs'), tmp: path.join(opts.dir, 'tmp') }
  fs.mkdirSync(opts.dir, { recursive: true, mode: PRIVATE_DIR_MODE })
  fs.chmodSync(opts.dir, PRIVATE_DIR_MODE)
  // What a pull interrupted by a crash left half done: never renamed into place, so never used.
  fs.rmSync(dirs.tmp, { recursive: true, force: true })
  for (const d of Object.values(dirs)) fs.mkdirSync(d, { recursive: true, mode: PRIVATE_DIR_MODE })

  const layerDir = (digest: string) => path.join(dirs.layers, hex(digest))
  /** Downloads in flight by layer digest; each reports its bytes to everyone waiting on it. */
  const layerPulls = new Map<string, { done: Promise<void>; listeners: Set<(n: number) => void> }>()
  /** Whole pulls in flight by reference. */
  const imagePulls = new Map<string, { done: Promise<PulledImage>; listeners: Set<(p: PullProgress) => void> }>()

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
          await unpackLayer(body, { dir: work, layer, diffId, maxUnpackedBytes, onBytes: (n) => listeners.forEach((l) => l(n)) })
          try {
            fs.renameSync(work, layerDir(layer.digest))
          } catch (err) {
            // Another process sharing the cache finished it first: its folder is as good as ours.
            if ((err as NodeJS.ErrnoException).code !== 'ENOTEMPTY' && (err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
          }
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

  async function pullOnce(ref: ImageReference, progress: (p: PullProgress) => void): Promise<PulledImage> {
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

  return {
    layerDir,
    async pull(input, pullOpts = {}) {
      let ref: ImageReference
      try {
        ref = parseImageReference(input)
      } catch (err) {
        if (err instanceof ImageReferenceError) throw new ImagePullError('malformed_reference', err.message)
        throw err
      }
      let shared = imagePulls.get(ref.canonical)
      if (!shared) {
        const listeners = new Set<(p: PullProgress) => void>()
        const done = pullOnce(ref, (p) => listeners.forEach((l) => l(p))).finally(() => imagePulls.delete(ref.canonical))
        // Each caller's await reports a failure; this one only keeps it from being unhandled.
        done.catch(() => {})
        shared = { done, listeners }
        imagePulls.set(ref.canonical, shared)
      }
      const listener = pullOpts.onProgress
      if (listener) shared.listeners.add(listener)
      try {
        return await until(shared.done, pullOpts.signal)
      } finally {
        if (listener) shared.listeners.delete(listener)
      }
    },
  }
}

/** The puller a node's settings ask for: its cache in `<data dir>/images`, registries reached as the deployment allows. */
export function configuredImagePuller(config: Pick<Config, 'dataDir' | 'imageAllowPrivate' | 'imagePlainHttp' | 'imageMaxLayerMb'>): ImagePuller {
  return imagePuller({
    dir: path.join(config.dataDir, 'images'),
    registry: { allowPrivate: config.imageAllowPrivate, plainHttp: config.imagePlainHttp },
    maxLayerBytes: config.imageMaxLayerMb * 1024 * 1024,
  })
}
