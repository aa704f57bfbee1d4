import fs from 'node:fs'
import path from 'node:path'
import { SandboxImageError, type ImageProgress, type SandboxSpec } from '../sandbox.ts'

/**
 * An image as the local provider's sandbox root: the node's pulled layers (shared, read-only) as
 * the lower folders of an overlay, the sandbox's own writable layer as its upper folder.
 *
 * The overlay is mounted by the service (root on the host) inside the mount namespace of the
 * sandbox's init, never on the host: it lives exactly as long as the sandbox, so a crashed run
 * leaves no overlay mounted anywhere (nothing for cleanupOrphans to unmount), and the kernel
 * takes it down with the last process of the sandbox on destroy and reclaim.
 */

/** What the provider needs of the node's image cache (src/images/image-puller.ts is one). */
export type ImageSource = {
  pull(ref: string, opts?: { onProgress?: (p: ImageProgress) => void }): Promise<{
    ref: string
    digest: string
    /** The image's config; its `config` holds what a container runs with. */
    config: { config: { Env?: string[]; WorkingDir?: string; User?: string } }
    /** Lowest first, each an unpacked folder in the form overlayfs takes as a lower folder. */
    layers: Array<{ dir: string }>
    /** Lets the cache remove the layers again once unused: called when the sandbox on them is gone. */
    release(): void
  }>
  /** Starts removing layers unused for the keep time (the node has joined: the cache is its own). */
  startSweeping?(): void
  /** Stops sweeping. */
  close?(): Promise<void>
}

/** An image resolved for one sandbox: what it mounts and what its processes get. */
export type ImageRoot = {
  ref: string
  digest: string
  /** Lowest first. */
  layers: string[]
  /** The sandbox's own writable layer and overlayfs's work folder (same file system). */
  upper: string
  work: string
  /** The image's Env, lowest precedence of what the sandbox's processes get. */
  env: Record<string, string>
  /** The image's WorkingDir when it names one other than `/`: where commands start when they name no folder. */
  workingDir: string | null
  /** The image's User as its config says it (see image-user.ts), null when it names none. */
  user: string | null
}

/** An image resolved and held in the cache for one sandbox until `release` (see ImageSource). */
export type ResolvedImage = Omit<ImageRoot, 'upper' | 'work'> & { release(): void }

/**
 * Pulls the image of `spec` (the digest pins it: `ref@digest`), reporting progress; any failure
 * of the image becomes a SandboxImageError with the puller's message as it is (it names the
 * registry and the reference, never a credential).
 */
export async function resolveImage(source: ImageSource, spec: SandboxSpec): Promise<ResolvedImage> {
  const image = spec.image!
  const digest = image.digest
  if (digest !== undefined && !/^sha256:[0-9a-f]{64}$/.test(digest)) throw new SandboxImageError(`the image digest ${JSON.stringify(digest)} is not a sha256 digest`)
  // A reference that already names a digest is pinned by it; a digest given beside a tag pins over the tag.
  const ref = digest === undefined || image.ref.includes('@') ? image.ref : `${image.ref}@${digest}`
  let pulled: Awaited<ReturnType<ImageSource['pull']>>
  try {
    pulled = await source.pull(ref, spec.onImageProgress ? { onProgress: spec.onImageProgress } : {})
  } catch (err) {
    // The puller's message names the registry and the reference already, and the workspace manager
    // puts "its image <ref> could not be had:" before it: a prefix here said the reference twice.
    throw new SandboxImageError((err as Error).message, { cause: err })
  }
  try {
    return settle(image.ref, pulled, digest)
  } catch (err) {
    pulled.release()
    throw err
  }
}

function settle(ref: string, pulled: Awaited<ReturnType<ImageSource['pull']>>, digest: string | undefined): ResolvedImage {
  if (digest !== undefined && pulled.digest !== digest) throw new SandboxImageError(`the image ${ref} resolved to ${pulled.digest}, not the pinned ${digest}`)
  if (pulled.layers.length === 0) throw new SandboxImageError(`the image ${ref} has no layers`)
  const env: Record<string, string> = {}
  // The config is the registry's word: a malformed entry is skipped, never a reason to fail the sandbox.
  for (const entry of pulled.config.config.Env ?? []) {
    const eq = entry.indexOf('=')
    const name = entry.slice(0, eq)
    if (eq > 0 && /^[A-Za-z_][A-Za-z0-9_.]*$/.test(name) && !entry.includes('\0')) env[name] = entry.slice(eq + 1)
  }
  const wd = pulled.config.config.WorkingDir
  const workingDir = wd && path.posix.isAbsolute(wd) && !wd.includes('\0') && path.posix.normalize(wd) !== '/' ? path.posix.normalize(wd) : null
  const u = pulled.config.config.User
  const user = typeof u === 'string' && u.trim() !== '' && u.length <= 256 && !/[\0\n]/.test(u) ? u.trim() : null
  return { ref, digest: pulled.digest, layers: pulled.layers.map((l) => l.dir), env, workingDir, user, release: () => pulled.release() }
}

/**
 * Readies the sandbox's own layer under `dir` (kept with the workspace, across reclaims, until the
 * workspace is deleted): `upper/` owned by the sandbox uid (so its `/` is its own to write in
 * while it runs unprivileged) and `work/`, and in the upper layer the folders and file the
 * sandbox's own mounts go on (bubblewrap, unprivileged, cannot make them in folders of the
 * image's root). The upper layer is what earlier runs of the sandbox wrote: hostile. Every path is
 * walked with lstat and nothing is followed; a link or other entry in the way is removed (from the
 * sandbox's own layer only).
 */
export function prepareLayer(dir: string, o: { owner: number; root: number; mounts: string[]; files: string[]; lowers: number }): { upper: string; work: string; lowers: string[] } {
  const upper = path.join(dir, 'upper')
  const work = path.join(dir, 'work')
  const lowerDir = path.join(dir, 'lower')
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  for (const d of [upper, work, lowerDir]) {
    const st = fs.lstatSync(d, { throwIfNoEntry: false })
    if (st && !st.isDirectory()) fs.rmSync(d, { force: true })
    if (!st?.isDirectory()) fs.mkdirSync(d, { mode: 0o700 })
  }
  fs.chmodSync(upper, 0o755)
  fs.chownSync(upper, o.owner, o.owner)
  for (const m of o.mounts) ensure(upper, m, 'dir', o.root)
  for (const f of o.files) ensure(upper, f, 'file', o.root)
  // Mount points of the idmapped binds of the image's layers, in the init's namespace only.
  const lowers = Array.from({ length: o.lowers }, (_, i) => path.join(lowerDir, String(i)))
  for (const l of lowers) fs.mkdirSync(l, { recursive: true, mode: 0o700 })
  return { upper, work, lowers }
}

function ensure(root: string, target: string, kind: 'dir' | 'file', owner: number): void {
  const parts = target.split('/').filter(Boolean)
  let at = root
  parts.forEach((part, i) => {
    at = path.join(at, part)
    const want = i === parts.length - 1 ? kind : 'dir'
    const st = fs.lstatSync(at, { throwIfNoEntry: false })
    if (st && (want === 'dir' ? st.isDirectory() : st.isFile())) return
    if (st) fs.rmSync(at, { recursive: true, force: true })
    if (want === 'dir') fs.mkdirSync(at, { mode: 0o755 })
    else fs.writeFileSync(at, '', { mode: 0o644, flag: 'wx' })
    // The sandbox's root owns them (host uid 0 when it has none: an unprivileged sandbox).
    fs.lchownSync(at, owner, owner)
  })
}

/**
 * overlayfs's mount options: the lower folders top first. A comma or colon would be read as a
 * separator, so a path holding one is refused (the cache and workspace folders are the service's own).
 */
/** overlayfs features off in every overlay of a sandbox (see overlayOptions). */
export const OVERLAY_FEATURES_OFF = 'redirect_dir=off,metacopy=off,index=off'

export function overlayOptions(root: Pick<ImageRoot, 'layers' | 'upper' | 'work'>): string {
  const all = [...root.layers, root.upper, root.work]
  const bad = all.find((p) => /[,:\n\\]/.test(p))
  if (bad) throw new SandboxImageError(`the folder ${bad} holds a character overlayfs cannot take in a path`)
  // Whatever the host's defaults: a renamed folder kept as a redirect, a chmod copied up as
  // metadata only, or an index would leave in the upper folder what a snapshot of it (plain files,
  // whiteouts, opaque folders) cannot carry, and the restored layer would lose it.
  return `lowerdir=${[...root.layers].reverse().join(':')},upperdir=${root.upper},workdir=${root.work},${OVERLAY_FEATURES_OFF}`
}
