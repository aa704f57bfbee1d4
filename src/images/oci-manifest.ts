import { ImagePullError } from './image-pull-error.ts'

/**
 * The OCI image-spec documents a pull reads (and Docker's v2 equivalents): an index (manifest
 * list) naming a manifest per platform, a manifest naming a config and layers, the config. A
 * registry's JSON is hostile input: each is checked for the fields used before anything is
 * fetched by them.
 */

/** A content descriptor: what a blob is, how big it says it is, its digest. */
export type Descriptor = { mediaType: string; digest: string; size: number; platform?: Platform }
export type Platform = { os: string; architecture: string; variant?: string }
export type ImageIndex = { kind: 'index'; manifests: Descriptor[] }
export type ImageManifest = { kind: 'manifest'; config: Descriptor; layers: Descriptor[] }
/** The config fields the workspace will honour, and the layers' uncompressed digests. */
export type ImageConfig = {
  os: string
  architecture: string
  config: { Env?: string[]; WorkingDir?: string; User?: string; Entrypoint?: string[]; Cmd?: string[] }
  diffIds: string[]
}

const INDEX_TYPES = new Set(['application/vnd.oci.image.index.v1+json', 'application/vnd.docker.distribution.manifest.list.v2+json'])
const MANIFEST_TYPES = new Set(['application/vnd.oci.image.manifest.v1+json', 'application/vnd.docker.distribution.manifest.v2+json'])
/** Layer media types and how each is compressed. */
export const LAYER_COMPRESSION: Record<string, 'gzip' | 'zstd' | 'none'> = {
  'application/vnd.oci.image.layer.v1.tar': 'none',
  'application/vnd.oci.image.layer.v1.tar+gzip': 'gzip',
  'application/vnd.oci.image.layer.v1.tar+zstd': 'zstd',
  'application/vnd.docker.image.rootfs.diff.tar.gzip': 'gzip',
}
const DIGEST = /^sha256:[a-f0-9]{64}$/
const MAX_LAYERS = 256

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)
const stringList = (v: unknown): v is string[] => Array.isArray(v) && v.every((s) => typeof s === 'string')

function json(bytes: Buffer, what: string): Record<string, unknown> {
  let parsed: unknown
  try {
    parsed = JSON.parse(bytes.toString('utf8'))
  } catch {
    throw new ImagePullError('registry_error', `${what} is not JSON`)
  }
  if (!isObject(parsed)) throw new ImagePullError('registry_error', `${what} is not a JSON object`)
  return parsed
}

function descriptor(v: unknown, what: string): Descriptor {
  if (!isObject(v) || typeof v.mediaType !== 'string' || typeof v.digest !== 'string' || !Number.isSafeInteger(v.size) || (v.size as number) < 0) {
    throw new ImagePullError('registry_error', `${what} is not a descriptor (mediaType, digest, size)`)
  }
  if (!DIGEST.test(v.digest)) throw new ImagePullError('unsupported', `${what} has digest ${JSON.stringify(v.digest.slice(0, 80))}; only sha256 digests are read`)
  const d: Descriptor = { mediaType: v.mediaType, digest: v.digest, size: v.size as number }
  if (isObject(v.platform) && typeof v.platform.os === 'string' && typeof v.platform.architecture === 'string') {
    d.platform = { os: v.platform.os, architecture: v.platform.architecture, ...(typeof v.platform.variant === 'string' ? { variant: v.platform.variant } : {}) }
  }
  return d
}

/** An index or a manifest, told apart by its media type (the header's, else the document's own). */
export function parseManifest(bytes: Buffer, headerType: string, what: string): ImageIndex | ImageManifest {
  const doc = json(bytes, what)
  if (doc.schemaVersion !== 2) throw new ImagePullError('unsupported', `${what} is not schema version 2`)
  const type = typeof doc.mediaType === 'string' ? doc.mediaType : headerType || (Array.isArray(doc.manifests) ? 'application/vnd.oci.image.index.v1+json' : 'application/vnd.oci.image.manifest.v1+json')
  if (INDEX_TYPES.has(type)) {
    if (!Array.isArray(doc.manifests)) throw new ImagePullError('registry_error', `${what} is an index with no manifests`)
    return { kind: 'index', manifests: doc.manifests.map((m, i) => descriptor(m, `${what}'s manifest ${i}`)) }
  }
  if (!MANIFEST_TYPES.has(type)) throw new ImagePullError('unsupported', `${what} has media type ${JSON.stringify(type.slice(0, 100))}, not an OCI or Docker v2 manifest`)
  if (!Array.isArray(doc.layers)) throw new ImagePullError('registry_error', `${what} has no layers`)
  if (doc.layers.length > MAX_LAYERS) throw new ImagePullError('too_large', `${what} has ${doc.layers.length} layers, over ${MAX_LAYERS}`)
  const layers = doc.layers.map((l, i) => descriptor(l, `${what}'s layer ${i}`))
  for (const l of layers) {
    if (!(l.mediaType in LAYER_COMPRESSION)) throw new ImagePullError('unsupported', `${what} has a layer of media type ${JSON.stringify(l.mediaType.slice(0, 100))}, not a tar (plain, gzip or zstd)`)
  }
  return { kind: 'manifest', config: descriptor(doc.config, `${what}'s config`), layers }
}

/** Node's names for CPU architectures, in OCI's (GOARCH) spelling. */
const ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ia32: '386', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64', loong64: 'loong64' }

/** The platform this process runs on, as an index names platforms. */
export function hostPlatform(): Platform {
  return { os: 'linux', architecture: ARCH[process.arch] ?? process.arch, ...(process.arch === 'arm64' ? { variant: 'v8' } : {}) }
}

/** The index's manifest for `platform`: its os and architecture, the variant when the index gives one. */
export function selectPlatform(index: ImageIndex, platform: Platform, what: string): Descriptor {
  const candidates = index.manifests.filter((m) => m.platform?.os === platform.os && m.platform.architecture === platform.architecture && MANIFEST_TYPES.has(m.mediaType))
  const exact = candidates.find((m) => m.platform?.variant === undefined || m.platform.variant === platform.variant)
  const chosen = exact ?? candidates[0]
  if (!chosen) {
    const offered = index.manifests.map((m) => (m.platform ? `${m.platform.os}/${m.platform.architecture}` : '?')).join(', ')
    throw new ImagePullError('unsupported', `${what} has no manifest for ${platform.os}/${platform.architecture} (it has ${offered.slice(0, 300) || 'none'})`)
  }
  return chosen
}

export function parseConfig(bytes: Buffer, what: string): ImageConfig {
  const doc = json(bytes, what)
  const rootfs = doc.rootfs
  if (!isObject(rootfs) || !stringList(rootfs.diff_ids) || !rootfs.diff_ids.every((d) => DIGEST.test(d))) {
    throw new ImagePullError('registry_error', `${what} has no rootfs.diff_ids of sha256 digests`)
  }
  const c = isObject(doc.config) ? doc.config : {}
  const config: ImageConfig['config'] = {}
  if (stringList(c.Env)) config.Env = c.Env
  if (typeof c.WorkingDir === 'string') config.WorkingDir = c.WorkingDir
  if (typeof c.User === 'string') config.User = c.User
  if (stringList(c.Entrypoint)) config.Entrypoint = c.Entrypoint
  if (stringList(c.Cmd)) config.Cmd = c.Cmd
  return { os: String(doc.os ?? ''), architecture: String(doc.architecture ?? ''), config, diffIds: rootfs.diff_ids }
}
