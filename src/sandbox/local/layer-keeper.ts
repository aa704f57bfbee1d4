import fs from 'node:fs'
import path from 'node:path'
import { SandboxUnavailableError } from '../sandbox.ts'
import { ROOT_RANGE_SIZE } from './idmap-root.ts'
import { overlayOptions, prepareLayer, type ResolvedImage } from './image-root.ts'
import { resolveImageUser } from './image-user.ts'
import { hostId, insideId, layerOwnersOf, placeLayer, remapOwners, sameOwners, writeOwners, type LayerOwners } from './layer-owners.ts'
import type { LocalSandboxContext } from './local-sandbox.ts'
import { ownerOf } from './workspace-owner.ts'
import type { LayerInto } from './workspace-unpack.ts'

export type LayerKeeperOptions = {
  /** Where every workspace lives; the layers are kept in its `.layers` folder. */
  workspaceRoot: string
  /** The node's sandbox uids (the root ranges start after them). */
  uidBase: number
  uidCount: number
  /** How many root ranges of ROOT_RANGE_SIZE uids the node has (0: none, image sandboxes run unprivileged). */
  rootRanges: number
}

/**
 * The sandboxes' own writable layers over their images, kept beside their workspaces (not in them:
 * the agent would see them at its mount) as long as the workspaces, and the root ranges they are
 * owned from: which range a sandbox gets, its layer given to its ids, packed and brought back with
 * its workspace's snapshot. The folder of a workspace `id` is named by the provider (`name`).
 */
export class LayerKeeper {
  /** First host uids of the root ranges held by live sandboxes. */
  readonly ranges = new Set<number>()

  private readonly o: LayerKeeperOptions

  constructor(o: LayerKeeperOptions) {
    this.o = o
  }

  dir(name: string): string {
    return path.join(this.o.workspaceRoot, '.layers', name)
  }

  upper(name: string): string {
    return path.join(this.dir(name), 'upper')
  }

  /** Whether `uid` is one of a live sandbox's root range. */
  inLiveRange(uid: number): boolean {
    return [...this.ranges].some((b) => uid >= b && uid < b + ROOT_RANGE_SIZE)
  }

  /** Whose ids the kept layer is owned from, or null without one (see layerOwnersOf). */
  owners(name: string, workspaceDir: string): LayerOwners | null {
    return layerOwnersOf(this.dir(name), workspaceDir, this.o.uidBase + this.o.uidCount)
  }

  /** What a pack of the workspace adds for its layer, if it has one (see packFolder). */
  packing(name: string, workspaceDir: string): { upper: string; ids: (host: number) => number } | undefined {
    const owners = this.owners(name, workspaceDir)
    return owners ? { upper: this.upper(name), ids: (h) => insideId(h, owners) } : undefined
  }

  /**
   * Where a restore unpacks the layer of a snapshot (beside the kept layers, under a dot-name that
   * start-up removes if the node dies meanwhile), owned as this node would most likely run it
   * (create remaps it if it gets other ids), and how to put it in place once the workspace is whole.
   */
  restoring(name: string, aside: string, freeUid: number | null): { layer: LayerInto; place: () => Promise<void> } {
    // Never the host's own ids for a root range's files: with every range in use, the first
    // range's (and, every uid in use, the first uid): no sandbox sees a kept layer but its own,
    // and the create that brings it back remaps it onto what it gets.
    const owners: LayerOwners = { base: this.o.rootRanges > 0 ? (this.pickRange(null) ?? this.firstRange()) : null, uid: freeUid ?? this.o.uidBase }
    return {
      layer: { into: path.join(aside, 'upper'), owner: (n: number) => hostId(n, owners) },
      place: () => placeLayer(this.dir(name), aside, owners),
    }
  }

  /** A restore's folder for the layer of `name`. */
  aside(name: string, tag: string): string {
    return path.join(this.o.workspaceRoot, '.layers', `.unpack-${name}-${tag}`)
  }

  /**
   * The image root of a sandbox of uid `uid` on `image` over `workspaceDir`: its range taken (root inside), its kept
   * layer given to its ids and readied for the mounts `mounts` and `files`, the image's User
   * resolved. `took` is told the range taken as soon as it is, so the caller releases it whatever
   * fails after.
   */
  async root(name: string, workspaceDir: string, image: ResolvedImage, uid: number, mounts: string[], took: (base: number) => void): Promise<NonNullable<LocalSandboxContext['image']>> {
    let base: number | null = null
    if (this.o.rootRanges > 0) {
      base = this.allocateRange(this.upper(name))
      took(base)
    }
    const dir = this.dir(name)
    // A layer kept (or brought back) owned from other ids than this sandbox gets is given to its ids.
    const had = this.owners(name, workspaceDir)
    const owners: LayerOwners = { base, uid }
    if (had && !sameOwners(had, owners)) {
      await remapOwners(this.upper(name), had, owners)
      writeOwners(dir, owners)
    }
    const layer = prepareLayer(dir, { owner: base ?? uid, root: base ?? 0, mounts, files: ['/etc/resolv.conf'], lowers: base === null ? 0 : image.layers.length })
    // Root inside: the overlay is made of the layers' idmapped binds, not the cache's folders.
    const lowers = base === null ? image.layers : layer.lowers
    const { release: _held, ...resolved } = image
    // Root inside, commands run as the image's User, read from its root as it stands (the
    // sandbox's own layer over the image's, top first); unprivileged, as the sandbox uid whatever it says.
    const user = base !== null && image.user ? await resolveImageUser(image.user, [layer.upper, ...[...image.layers].reverse()]) : { uid: 0, gid: 0 }
    writeOwners(dir, owners)
    return {
      ...resolved,
      ...layer,
      overlay: overlayOptions({ layers: lowers, ...layer }),
      root: base === null ? null : { base, lowers: image.layers.map((src, i) => ({ src, dst: layer.lowers[i]! })), user },
    }
  }

  /** At start: layers a restore was unpacking when the node died (`.layers/.unpack-…`) go. */
  async removeLeftUnpacks(): Promise<void> {
    const root = path.join(this.o.workspaceRoot, '.layers')
    const names = await fs.promises.readdir(root).catch(() => [] as string[]) // no layer kept yet
    for (const n of names) if (n.startsWith('.unpack-')) await fs.promises.rm(path.join(root, n), { recursive: true, force: true })
  }

  private firstRange(): number {
    return this.o.uidBase + this.o.uidCount
  }

  /** The owners of the kept layers' upper folders but `upper`'s (read as they are: the folder is the service's). */
  private keptLayerOwners(upper: string): Set<number> {
    const root = path.join(this.o.workspaceRoot, '.layers')
    let names: string[]
    try {
      names = fs.readdirSync(root)
    } catch {
      return new Set() // no layer kept yet
    }
    // Dot-names are restores under way (or left by a crash), not kept layers.
    return new Set(names.filter((n) => !n.startsWith('.')).map((n) => path.join(root, n, 'upper')).filter((u) => u !== upper).map(ownerOf))
  }

  /**
   * A root range for a sandbox on an image: the one its layer's files are owned from when it is
   * free (a workspace brought back keeps its owners), else the lowest free one that no other kept
   * layer is owned from, else the lowest free one. A new workspace taking the range of one that is
   * reclaimed (or kept across a restart) would leave that one, brought back on another range, with
   * its own files owned by uids its root does not map: not its to write.
   */
  private allocateRange(upper: string): number {
    const base = this.pickRange(upper)
    if (base === null) throw new SandboxUnavailableError(`all ${this.o.rootRanges} root uid ranges are in use`)
    this.ranges.add(base)
    return base
  }

  /** The range allocateRange would give the layer `upper` (null: a layer not made yet), without taking it; null when none is free. */
  private pickRange(upper: string | null): number | null {
    const bases = Array.from({ length: this.o.rootRanges }, (_, i) => this.firstRange() + i * ROOT_RANGE_SIZE)
    const owner = upper === null ? -1 : ownerOf(upper)
    const own = bases.find((b) => owner === b && !this.ranges.has(b))
    const kept = own === undefined ? this.keptLayerOwners(upper ?? '') : new Set<number>()
    return own ?? bases.find((b) => !this.ranges.has(b) && !kept.has(b)) ?? bases.find((b) => !this.ranges.has(b)) ?? null
  }
}
