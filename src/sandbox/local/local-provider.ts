import { createHash } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type { Readable } from 'node:stream'
import { DEFAULT_WORKSPACE_MAX_WATCHES } from './local-settings.ts'
import type { HostClaim, HostReport, Sandbox, SandboxProvider, SandboxSpec, WorkspaceReader } from '../sandbox.ts'
import { SandboxImageError, SandboxUnavailableError } from '../sandbox.ts'
import { ROOT_RANGE_SIZE } from './idmap-root.ts'
import { resolveImage, type ImageSource, type ResolvedImage } from './image-root.ts'
import { checkMount } from './bubblewrap.ts'
import { listGroups, SandboxCgroup } from './cgroups.ts'
import { pickStageDir, probeHost, type HostProbe } from './host-check.ts'
import { imageReport, probeImageMounts, type ImageProbe, type ImageReport } from './image-host-check.ts'
import { LocalSandbox, type AttachedNetwork, type LocalSandboxContext } from './local-sandbox.ts'
import { dropSlot, makeSlot, WarmPool, type WarmSlot } from './warm-pool.ts'
import { workspaceReader } from './workspace-files.ts'
import { packFolder } from './workspace-pack.ts'
import { DiskFull, unpackInto } from './workspace-unpack.ts'
import { isEmptyOrMissing } from '../../shared/empty-folder.ts'
import { LayerKeeper } from './layer-keeper.ts'
import { randomText } from '../../shared/ids.ts'
import { killStrays, ownerOf, prepareWorkspace, reachableBy } from './workspace-owner.ts'
import { removeLeftFences } from './workspace-watch.ts'
import { WorkspaceDisks } from './workspace-disk.ts'
import { logFailure, silentLog, type Log } from '../../shared/log.ts'

/**
 * NETWORK HOOK (src/sandbox/local/network.ts implements it). Without one, sandboxes have no
 * network at all (bwrap --unshare-net) and resolvePreview rejects. With one, a sandbox whose
 * attach gives a netnsName runs inside that namespace (`ip netns exec`), gets `env` (proxy
 * variables) and is previewed at previewHost.
 */
export type NetworkHook = {
  /** Readies the host for namespaces; awaited before any shell is parked (they keep the mounts they saw). */
  prepare?(): Promise<void>
  attach(spec: SandboxSpec): Promise<AttachedNetwork>
  detach(id: string): Promise<void>
  cleanupOrphans(): Promise<void>
  /** Fills the hook's own warm pool (namespaces built ahead of attach), if it keeps one. */
  warmUp?(): Promise<void>
  /** Releases what the hook holds ahead of need (its warm pool). */
  close?(): Promise<void>
}

export type LocalProviderOptions = {
  /** Host folder holding every workspace, one folder per sandbox id (the service's `<data>/workspaces`). */
  workspaceRoot: string
  network?: NetworkHook
  /** First host uid handed to sandboxes; each live sandbox holds one uid (= gid). Default 200000. */
  uidBase?: number
  /** How many uids from uidBase this provider may use. Default 10000. */
  uidCount?: number
  /** The cgroup folder (in every hierarchy) holding this provider's sandboxes. Default `warren`. */
  cgroupParent?: string
  /** Names each sandbox's cgroup `<prefix><id>`; cleanupOrphans removes every such group it does not hold. Default `warren-`. */
  prefix?: string
  /** Host folder a workspace the sandbox uid cannot reach is bound onto, in a private mount namespace. Default /mnt. */
  stageDir?: string
  /** Sandboxes' cgroups and parked shells kept ready ahead of create (see warm-pool.ts). Default 2. */
  warm?: number
  /** bubblewrap to use instead of the one on PATH. */
  bwrap?: string
  /**
   * false runs as on a host without cgroups: no limits, pause by SIGSTOP, kills by process group
   * and pid namespace. For tests of those paths; the default uses whatever the host offers.
   */
  cgroups?: boolean
  /** Most folders of one workspace watched for changes (an inotify watch each, from the host's shared budget); past it the workspace is walked instead. Default 10000. */
  maxWatches?: number
  /**
   * Each workspace's disk quota in bytes: its folder is the mount point of a file system of its
   * own of this size (see workspace-disk.ts), images kept in `<workspaceRoot>/.disks`. Absent or 0:
   * plain folders, bounded only by the host's disk.
   */
  diskBytes?: number
  /** Where failures the provider lives with (a clean-up that did not finish) are told; silent otherwise. */
  log?: Log
  /**
   * The deployment prefix and subnet its network holds, reported with its uids as its claim
   * (createLocalProvider gives them). Default: the cgroup prefix and no subnet (no network).
   */
  claim?: Pick<HostClaim, 'prefix' | 'subnet'>
  /**
   * The node's image cache (src/images/image-puller.ts), for sandboxes on an image (spec.image);
   * without it such a create is refused with SandboxUnavailableError.
   */
  images?: ImageSource
  /**
   * How many sandboxes on an image may run as root inside at once: each holds a range of
   * ROOT_RANGE_SIZE host uids of its own, from uidBase + uidCount on, and the claim grows by them
   * (see idmap-root.ts). 0 (the default): sandboxes on an image run as their unprivileged uid.
   */
  rootRanges?: number
}

/**
 * Bubblewrap sandboxes on this host: each one its own unprivileged uid, namespaces, cgroup and
 * long-lived init (see local-sandbox.ts and bubblewrap.ts).
 */
export class LocalSandboxProvider implements SandboxProvider {
  readonly name = 'local'
  readonly claim: HostClaim
  private disks: WorkspaceDisks
  private opts: { workspaceRoot: string; uidBase: number; uidCount: number; rootRanges: number; cgroupParent: string; prefix: string; stageDir: string | null; bwrap?: string; cgroups?: boolean; maxWatches: number; diskBytes: number }
  private network: NetworkHook | null
  private images: ImageSource | null
  private log: Log
  private probed: HostProbe | null = null
  private imageProbed: ImageProbe | null = null
  private live = new Map<string, LocalSandbox>()
  /** Group names of sandboxes being created or alive: never orphans. */
  private held = new Set<string>()
  private uids = new Set<number>()
  private layers: LayerKeeper
  private pool: WarmPool
  private networkWarm = false
  private prepared: Promise<void> | null = null

  constructor(options: LocalProviderOptions) {
    this.network = options.network ?? null
    this.images = options.images ?? null
    this.log = options.log ?? silentLog
    if (!path.isAbsolute(options.workspaceRoot)) throw new TypeError('workspaceRoot must be an absolute host path')
    const opts = {
      workspaceRoot: options.workspaceRoot,
      uidBase: options.uidBase ?? 200_000,
      uidCount: options.uidCount ?? 10_000,
      rootRanges: options.rootRanges ?? 0,
      cgroupParent: options.cgroupParent ?? 'warren',
      prefix: options.prefix ?? 'warren-',
      stageDir: pickStageDir(options.stageDir),
      bwrap: options.bwrap,
      cgroups: options.cgroups,
      maxWatches: options.maxWatches ?? DEFAULT_WORKSPACE_MAX_WATCHES,
      diskBytes: options.diskBytes ?? 0,
    }
    this.opts = opts
    this.claim = { prefix: options.claim?.prefix ?? opts.prefix, subnet: options.claim?.subnet ?? null, uidBase: opts.uidBase, uidCount: opts.uidCount + opts.rootRanges * ROOT_RANGE_SIZE }
    this.layers = new LayerKeeper({ workspaceRoot: opts.workspaceRoot, uidBase: opts.uidBase, uidCount: opts.uidCount, rootRanges: opts.rootRanges })
    this.disks = new WorkspaceDisks(opts.workspaceRoot, opts.diskBytes, options.log)
    if (!Number.isInteger(opts.uidBase) || opts.uidBase < 1000 || !Number.isInteger(opts.uidCount) || opts.uidCount < 1) {
      throw new RangeError('uidBase must be an integer ≥ 1000 and uidCount ≥ 1')
    }
    if (!Number.isInteger(opts.rootRanges) || opts.rootRanges < 0 || this.claim.uidBase + this.claim.uidCount > 2 ** 32 - 1) {
      throw new RangeError(`rootRanges must be an integer ≥ 0 whose ranges of ${ROOT_RANGE_SIZE} uids end below 4294967295`)
    }
    const parts = opts.cgroupParent.split('/')
    if (parts.some((p) => !/^[A-Za-z0-9_.-]+$/.test(p) || p === '.' || p === '..')) throw new TypeError(`invalid cgroup parent ${opts.cgroupParent}`)
    if (!/^[A-Za-z0-9_-]+$/.test(opts.prefix)) throw new TypeError(`invalid cgroup prefix ${opts.prefix}`)
    this.pool = new WarmPool(options.warm ?? 2, opts.prefix, (name) => this.slot(name), options.log)
  }

  /** The host check, run once (it starts one throw-away sandbox). */
  probe(): HostProbe {
    const { uidBase, uidCount, bwrap, cgroups } = this.opts
    this.probed ??= probeHost({ probeUid: uidBase + uidCount - 1, bwrap, cgroups })
    return this.probed
  }

  report(): HostReport {
    const p = this.probe()
    const problem = this.disks.probe()
    const disk = problem ? [`workspace disk quotas (${problem})`] : []
    const images = this.images ? this.imageReport(p) : null
    return {
      provider: this.name,
      available: [...p.available, ...(images?.available ?? [])],
      missing: [...p.fatal, ...p.missing, ...disk, ...(images?.missing ?? [])],
      images: images?.support ?? null,
    }
  }

  /** What workspaces on an image get here, probed once (image-host-check.ts). */
  private imageReport(p: HostProbe): ImageReport {
    if (!this.opts.stageDir) return imageReport('none of /mnt, /media, /srv exists to mount its root on', this.opts.rootRanges)
    if (!p.tools || p.fatal.length) return imageReport('no workspace can start here', this.opts.rootRanges)
    this.imageProbed ??= probeImageMounts({ tools: p.tools, dir: this.opts.workspaceRoot, base: this.claim.uidBase + this.opts.uidCount })
    return imageReport(this.imageProbed, this.opts.rootRanges)
  }

  get(id: string): Sandbox | null {
    return this.live.get(id) ?? null
  }

  workspace(id: string): WorkspaceReader {
    const reader = workspaceReader(this.workspaceDir(id))
    if (this.disks.bytes === 0) return reader
    // After a restart the workspace's file system is not mounted until something reads it.
    const mounted = <A extends unknown[], R>(f: (...a: A) => Promise<R>) => async (...a: A) => {
      await this.disks.mountIfImage(safeName(id))
      return f(...a)
    }
    return { readFile: mounted(reader.readFile), stat: mounted(reader.stat), list: mounted(reader.list), openRead: mounted(reader.openRead), snapshot: mounted(reader.snapshot) }
  }

  async deleteWorkspace(id: string): Promise<void> {
    await this.live.get(id)?.destroy()
    await this.disks.unmount(safeName(id), true)
    await fs.promises.rm(this.workspaceDir(id), { recursive: true, force: true })
    await fs.promises.rm(this.layers.dir(safeName(id)), { recursive: true, force: true })
  }

  async packWorkspace(id: string): Promise<Readable | null> {
    await this.disks.mountIfImage(safeName(id))
    // A sandbox on an image: its own layer goes with its workspace (what the agent installed outside it).
    return packFolder(this.workspaceDir(id), this.layers.packing(safeName(id), this.workspaceDir(id)))
  }

  async unpackWorkspace(id: string, archive: Readable): Promise<boolean> {
    // A sandbox being created or running holds the folder, and an unpack holds it from creates.
    const name = this.groupName(id)
    if (this.held.has(name)) return false
    this.held.add(name)
    try {
      // Never over files (unpackInto refuses them too). With quotas, unpacked into a file system
      // of the quota, so a snapshot counts against it as it is written and one past it fails,
      // rather than landing on the host's disk; that file system becomes the workspace's only
      // once whole. Without, unpacked into the folder.
      const dir = this.workspaceDir(id)
      await this.disks.mountIfImage(safeName(id))
      if (!isEmptyOrMissing(dir)) return false
      // The layer (if the archive has one) is unpacked aside and put in place once the workspace is whole.
      const aside = this.layers.aside(safeName(id), randomText(8))
      const { layer, place } = this.layers.restoring(safeName(id), aside, this.pickUid(-1))
      try {
        const restored = (await this.disks.restore(safeName(id), async (into) => (await unpackInto(into, archive, { inside: true, layer })) && isEmptyOrMissing(dir))) ?? (await unpackInto(dir, archive, { layer }))
        if (!restored) return false
        try {
          await place()
        } catch (err) {
          // All or nothing: the workspace goes again, as missing as it was.
          await this.disks.unmount(safeName(id), true)
          await fs.promises.rm(dir, { recursive: true, force: true })
          throw err
        }
        return true
      } catch (err) {
        if (err instanceof DiskFull) throw new DiskFull(`the snapshot of ${id} does not fit its workspace's disk quota of ${this.disks.bytes} bytes`, { cause: err })
        throw err
      } finally {
        await fs.promises.rm(aside, { recursive: true, force: true })
      }
    } finally {
      this.held.delete(name)
    }
  }

  async create(spec: SandboxSpec): Promise<Sandbox> {
    if (spec.image && !this.images) throw new SandboxUnavailableError(`this node has no image cache to start a sandbox on ${spec.image.ref}`)
    if (spec.image && !this.opts.stageDir) throw new SandboxUnavailableError('a sandbox on an image needs one of /mnt, /media, /srv to mount its root on')
    const probe = this.probe()
    if (probe.fatal.length || !probe.tools) throw new SandboxUnavailableError(probe.fatal.join(' '))
    checkSpec(spec)
    const name = this.groupName(spec.id)
    if (this.held.has(name)) throw new SandboxUnavailableError(`a sandbox ${spec.id} is already running`)
    const dir = this.workspaceDir(spec.id)
    if (spec.existing && !fs.existsSync(dir)) throw new SandboxUnavailableError(`the workspace of ${spec.id} is gone`)
    this.held.add(name)
    // The image first: a pull may take a while, and nothing of the sandbox is made until it is had.
    // It stays held in the cache (never swept) until the sandbox is released.
    let image: ResolvedImage | null = null
    try {
      if (spec.image) image = await resolveImage(this.images!, spec)
      await this.disks.mount(safeName(spec.id))
    } catch (err) {
      image?.release()
      this.held.delete(name)
      if (err instanceof SandboxImageError) throw err
      throw new SandboxUnavailableError(`the workspace's file system could not be mounted: ${(err as Error).message.split('\n')[0]}`, { cause: err })
    }
    const uid = this.allocate(dir)
    let slot: WarmSlot | null = null
    let attached = false
    let base: number | null = null
    const release = () => {
      this.held.delete(name)
      this.uids.delete(uid)
      if (base !== null) this.layers.ranges.delete(base)
      image?.release()
    }
    try {
      await prepareWorkspace(dir, uid, probe.tools.chown)
      let root: LocalSandboxContext['image'] = null
      // The sandbox's own layer over its image, given to its ids (root inside: a range of its own).
      if (image) root = await this.layers.root(safeName(spec.id), dir, image, uid, [spec.workspaceMount, '/proc', '/dev', '/tmp'], (b) => (base = b))
      const stageDir = root || !reachableBy(dir, uid) ? this.opts.stageDir : null
      if (stageDir === null && !reachableBy(dir, uid)) {
        throw new SandboxUnavailableError(`the sandbox user cannot reach ${dir} and none of /mnt, /media, /srv exists to stage it on: make its parent folders searchable (chmod o+x)`)
      }
      // A group of that name is a leftover of a crashed run that nobody cleaned: it goes first.
      const leftover = new SandboxCgroup(probe.cgroups, this.opts.cgroupParent, name)
      if (leftover.dirs.some((d) => fs.existsSync(d))) await leftover.destroy()
      slot = this.pool.take()
      if (slot) slot.cgroup.rename(name)
      else slot = await this.slot(name)
      slot.cgroup.limit(spec.limits)
      const net = this.network ? await this.network.attach(spec) : null
      attached = net !== null
      // From the first networked sandbox on, keep namespaces built ahead of the next create.
      if (attached && !this.networkWarm) {
        this.networkWarm = true
        setTimeout(() => void this.network?.warmUp?.().catch(logFailure(this.log, 'building sandbox network namespaces ahead failed', { component: 'sandbox' })), 100).unref()
      }
      const sandbox: LocalSandbox = new LocalSandbox({
        // Without the progress callback: it is not the sandbox's to keep (nor cloneable).
        spec: structuredClone({ ...spec, onImageProgress: undefined }),
        workspaceDir: dir,
        maxWatches: this.opts.maxWatches,
        uid,
        tools: probe.tools,
        cgroup: slot.cgroup,
        stageDir,
        network: net,
        image: root,
        initShell: slot.init,
        spare: { parked: slot.exec, exec: slot.execGroup, nsPid: null },
        detachNetwork: async () => {
          if (attached) await this.network!.detach(spec.id)
        },
        released: async () => {
          if (this.live.get(spec.id) === sandbox) this.live.delete(spec.id)
          release()
          // Reclaimed or stopped: its file system is mounted again by the next use (a reader, a create).
          await this.disks.unmount(safeName(spec.id), false, () => this.held.has(name)).catch(logFailure(this.log, 'unmounting a released workspace failed', { component: 'sandbox', sandbox: spec.id }))
        },
      })
      await sandbox.ensureInit()
      this.live.set(spec.id, sandbox)
      return sandbox
    } catch (err) {
      if (slot) await dropSlot(slot).catch(logFailure(this.log, 'dropping the cgroup and shells of a failed create failed', { component: 'sandbox', sandbox: spec.id }))
      if (attached) await this.network!.detach(spec.id).catch(logFailure(this.log, 'detaching the network of a failed create failed', { component: 'sandbox', sandbox: spec.id }))
      release()
      if (err instanceof SandboxUnavailableError || err instanceof SandboxImageError) throw err
      throw new SandboxUnavailableError(`the sandbox could not be created: ${(err as Error).message}`, { cause: err })
    }
  }

  async cleanupOrphans(): Promise<void> {
    const probe = this.probe()
    for (const name of listGroups(probe.cgroups, this.opts.cgroupParent, this.opts.prefix)) {
      if (this.held.has(name) || this.pool.names.has(name)) continue
      await new SandboxCgroup(probe.cgroups, this.opts.cgroupParent, name).destroy()
    }
    // The root ranges too: a process of a live sandbox's range is its root's (or one of its users').
    const live = (uid: number) => this.uids.has(uid) || this.layers.inLiveRange(uid)
    if (probe.cgroups.version === null) killStrays(this.claim.uidBase, this.claim.uidCount, live)
    await this.network?.cleanupOrphans()
    removeLeftFences(this.opts.prefix, (name) => this.held.has(name))
    await this.layers.removeLeftUnpacks()
    this.disks.adopt()
    // Called at start, once the node has joined: its image cache is its own to sweep from here.
    this.images?.startSweeping?.()
    // The service calls this at start: a good moment to warm the first slot.
    if (probe.tools && !probe.fatal.length) this.pool.refill()
  }

  /** Resolves once the warm pool is full: a create then costs no cgroup join. */
  async warmUp(): Promise<void> {
    const probe = this.probe()
    if (probe.tools && !probe.fatal.length) await this.pool.fill()
    await this.network?.warmUp?.()
  }

  async close(): Promise<void> {
    await this.pool.close()
    const results = await Promise.allSettled([...this.live.values()].map((s) => s.destroy()))
    await this.disks.close()
    await this.images?.close?.()
    await this.network?.close?.()
    const failed = results.find((r) => r.status === 'rejected')
    if (failed) throw (failed as PromiseRejectedResult).reason
  }

  /** Where the first init shell of every sandbox is parked: after the network readied the host (see NetworkHook.prepare). */
  private async slot(name: string): Promise<WarmSlot> {
    const probe = this.probe()
    this.prepared ??= (this.network?.prepare?.() ?? Promise.resolve()).catch((err) => {
      this.prepared = null
      throw new Error(`the host is not ready for network namespaces: ${(err as Error).message}`, { cause: err })
    })
    await this.prepared
    // Before any sandbox's mount namespace is made: workspaces mounted later must reach it.
    await this.disks.share()
    return makeSlot(probe.cgroups, this.opts.cgroupParent, name, probe.tools!)
  }

  /** `<prefix><id>` (see safeName), never holding `~`: see WarmPool. */
  private groupName(id: string): string {
    return this.opts.prefix + safeName(id)
  }

  /** The host folder of a workspace: kept across sandboxes and restarts, so named by the id alone. */
  private workspaceDir(id: string): string {
    return path.join(this.opts.workspaceRoot, safeName(id))
  }

  /**
   * A uid for the sandbox: the workspace's current owner when it is ours and free (a workspace
   * brought back after a reclaim keeps its uid and needs no chown), else the lowest free one.
   */
  private allocate(dir: string): number {
    const uid = this.pickUid(ownerOf(dir))
    if (uid === null) throw new SandboxUnavailableError(`all ${this.opts.uidCount} sandbox uids are in use`)
    this.uids.add(uid)
    return uid
  }

  /** `owner` when it is one of ours and free, else the lowest free uid, without taking it; null when none is free. */
  private pickUid(owner: number): number | null {
    const { uidBase, uidCount } = this.opts
    if (owner >= uidBase && owner < uidBase + uidCount && !this.uids.has(owner)) return owner
    for (let u = uidBase; u < uidBase + uidCount; u++) if (!this.uids.has(u)) return u
    return null
  }
}

/** The id itself, or a hash for ids that are no safe folder name. */
function safeName(id: string): string {
  const safe = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}$/.test(id)
  return safe ? id : `h-${createHash('sha256').update(id).digest('hex').slice(0, 24)}`
}

function checkSpec(spec: SandboxSpec): void {
  if (typeof spec.id !== 'string' || spec.id.length === 0) throw new TypeError('the sandbox id is empty')
  const bad = checkMount(spec.workspaceMount)
  if (bad) throw new TypeError(`workspaceMount ${spec.workspaceMount} ${bad}`)
  const { memoryBytes, pids, cpus } = spec.limits
  if (!(memoryBytes >= 4 * 1024 * 1024) || !(pids >= 8) || !(cpus > 0)) {
    throw new RangeError('limits need memoryBytes ≥ 4 MiB, pids ≥ 8 and cpus > 0')
  }
}
