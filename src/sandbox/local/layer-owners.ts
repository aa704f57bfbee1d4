import fs from 'node:fs'
import path from 'node:path'
import { ROOT_RANGE_SIZE } from './idmap-root.ts'
import { ownerOf } from './workspace-owner.ts'

/**
 * Whose host uids a sandbox's own layer (the upper folder over its image) is owned from, so that
 * the layer can travel in a snapshot and come back on a node (or a range) that gives the sandbox
 * other host uids.
 *
 * `base`: the first host uid of the sandbox's root range (root inside: uid n inside is host
 * `base + n`), null when it runs unprivileged (the image's own ids are then host ids as pulled,
 * and copies up of the image's files keep them). `uid`: the sandbox's own unprivileged host uid
 * (what an unprivileged agent's files are owned by; inside a root range it is uid 65536).
 *
 * In a snapshot every id is written as the image sees it: n for the image's uid n (0 is its
 * root), ROOT_RANGE_SIZE (65536) for the sandbox's own uid, NOBODY for any other (no file of the
 * layer should have one; it is never mapped to a host id outside what the sandbox owns).
 */
export type LayerOwners = { base: number | null; uid: number }

/** Inside ids: the image's 0…65535, then the sandbox's own uid. */
export const OWN_ID = ROOT_RANGE_SIZE
/** The id a foreign owner is written as (the kernel's overflow id). */
export const NOBODY = 65_534

/** A host id of the layer as the image sees it. */
export function insideId(host: number, o: LayerOwners): number {
  if (host === o.uid) return OWN_ID
  if (o.base !== null) return host >= o.base && host < o.base + ROOT_RANGE_SIZE ? host - o.base : NOBODY
  return host >= 0 && host < ROOT_RANGE_SIZE ? host : NOBODY
}

/** The host id an inside id is owned by in a layer of `o` (an id past OWN_ID, from a hostile archive, as NOBODY). */
export function hostId(inside: number, o: LayerOwners): number {
  const id = Number.isSafeInteger(inside) && inside >= 0 && inside <= OWN_ID ? inside : NOBODY
  if (id === OWN_ID) return o.uid
  return (o.base ?? 0) + id
}

const RECORD = 'owners.json'

/** The owners recorded beside the layer's upper folder, or null (a layer made before they were recorded, or none). */
export function readOwners(layerDir: string): LayerOwners | null {
  try {
    const o = JSON.parse(fs.readFileSync(path.join(layerDir, RECORD), 'utf8')) as LayerOwners
    const ok = Number.isSafeInteger(o.uid) && (o.base === null || Number.isSafeInteger(o.base))
    return ok ? { base: o.base, uid: o.uid } : null
  } catch {
    return null // none recorded, or a record torn by a crash: the caller derives them
  }
}

export function writeOwners(layerDir: string, o: LayerOwners): void {
  const file = path.join(layerDir, RECORD)
  const tmp = `${file}.tmp`
  fs.writeFileSync(tmp, JSON.stringify({ base: o.base, uid: o.uid }), { mode: 0o600 })
  fs.renameSync(tmp, file)
}

/**
 * The owners of the layer kept in `layerDir`: as recorded at its sandbox's create, or, for a layer
 * made before they were recorded, from its upper folder's owner (prepareLayer gives it to the root
 * range's first uid, or to the sandbox uid without one: a uid from `firstRangeUid` on is a range).
 * Null when no layer is kept.
 */
export function layerOwnersOf(layerDir: string, workspaceDir: string, firstRangeUid: number): LayerOwners | null {
  const recorded = readOwners(layerDir)
  if (recorded) return recorded
  const owner = ownerOf(path.join(layerDir, 'upper'))
  if (owner < 0) return null
  return owner >= firstRangeUid ? { base: owner, uid: ownerOf(workspaceDir) } : { base: null, uid: owner }
}

/**
 * The layer unpacked in `aside` (its `upper`) becomes the one kept in `layerDir` with its owners
 * recorded (what was kept there goes: the workspace it went with is gone), unless the archive had
 * none (a snapshot of a sandbox on the host's system, or one taken before layers were packed):
 * then what is kept stays.
 */
export async function placeLayer(layerDir: string, aside: string, owners: LayerOwners): Promise<void> {
  const upper = path.join(aside, 'upper')
  if (!fs.existsSync(upper) || fs.readdirSync(upper).length === 0) return
  writeOwners(aside, owners)
  // The old one is moved out of the way at once and deleted after, not on the event loop (a layer
  // may be thousands of files); under a dot-name that start-up removes if the node dies meanwhile.
  const old = `${aside}-old`
  let moved = true
  try {
    fs.renameSync(layerDir, old)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    moved = false // none kept before
  }
  fs.renameSync(aside, layerDir)
  if (moved) await fs.promises.rm(old, { recursive: true, force: true })
}

export const sameOwners = (a: LayerOwners, b: LayerOwners) => a.base === b.base && a.uid === b.uid

/**
 * Gives every entry of `upper` the host ids of `to` that stand for the ids of `from` it has now
 * (a layer brought back onto another root range or another sandbox uid). Only while no sandbox
 * runs over the layer (its creator holds it): entries are walked by path with lstat, links are
 * chowned themselves (lchown), never followed. Asynchronous, so a large layer never stalls the
 * service; chown clears setuid and setgid, so modes are set again. An id of `to`'s own already
 * (a remap cut short by a crash, done again) is left as it is.
 */
export async function remapOwners(upper: string, from: LayerOwners, to: LayerOwners): Promise<void> {
  const own = (id: number) => id === to.uid || (to.base !== null && id >= to.base && id < to.base + ROOT_RANGE_SIZE)
  const map = (id: number) => (own(id) ? id : hostId(insideId(id, from), to))
  const visit = async (p: string): Promise<void> => {
    const st = await fs.promises.lstat(p)
    const uid = map(st.uid)
    const gid = map(st.gid)
    if (uid !== st.uid || gid !== st.gid) {
      await fs.promises.lchown(p, uid, gid)
      if (!st.isSymbolicLink() && st.mode & 0o6000) await fs.promises.chmod(p, st.mode & 0o7777)
    }
    if (st.isDirectory()) for (const name of await fs.promises.readdir(p)) await visit(path.join(p, name))
  }
  await visit(upper)
}
