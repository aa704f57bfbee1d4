import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import type { HostImageSupport } from '../sandbox.ts'
import type { Tools } from './bubblewrap.ts'
import { idmapRootArgv } from './idmap-root.ts'
import { OVERLAY_FEATURES_OFF } from './image-root.ts'

/** What this host allows workspaces on an image: each a reason it cannot, or null when it can. */
export type ImageProbe = {
  /** An overlay of shared lower folders under a writable layer of its own (every image workspace needs it). */
  overlay: string | null
  /** The image's layers idmapped onto a range of host uids, the overlay made of them (root inside: WARREN_SANDBOX_ROOT_RANGES). */
  uidRanges: string | null
}

/**
 * Mounts what an image workspace mounts, once, on throw-away folders under `dir` (the workspace
 * root: the file system the sandboxes' own layers are on) and inside a mount namespace of its own
 * (`unshare -m`), so nothing stays mounted on the host whatever happens: first a plain overlay,
 * then the root-inside stack the local provider really runs (idmap-root.ts: idmapped layer binds,
 * the overlay of them, the workspace idmapped into it) with `base` as the range's first uid. Two
 * short processes; the kernel says no in a few milliseconds when it cannot.
 */
export function probeImageMounts(o: { tools: Tools; dir: string; base: number }): ImageProbe {
  fs.mkdirSync(o.dir, { recursive: true, mode: 0o700 })
  const root = fs.mkdtempSync(path.join(o.dir, '.image-probe-'))
  try {
    const d = (name: string) => {
      const p = path.join(root, name)
      fs.mkdirSync(p, { recursive: true, mode: 0o700 })
      return p
    }
    const lower = d('lower')
    d('lower/workspace')
    const run = (argv: string[]): string | null => {
      const r = spawnSync(o.tools.unshare, ['-m', '--propagation', 'private', '--', ...argv], { env: { PATH: '/usr/bin:/bin' }, timeout: 10_000, encoding: 'utf8' })
      if (r.status === 0) return null
      return (r.stderr || r.error?.message || `exit ${r.status}`).trim().split('\n')[0]!
    }
    const overlay = run([o.tools.mount, '-n', '-t', 'overlay', 'overlay', '-o', `lowerdir=${lower},upperdir=${d('upper')},workdir=${d('work')},${OVERLAY_FEATURES_OFF}`, d('stage')])
    if (overlay !== null) return { overlay, uidRanges: 'no overlay to make of the idmapped layers' }
    const bound = d('bound/0')
    const uidRanges = run(
      idmapRootArgv({
        perl: o.tools.perl,
        base: o.base,
        owner: 0,
        user: { uid: 0, gid: 0 },
        overlay: `lowerdir=${bound},upperdir=${d('upper2')},workdir=${d('work2')},${OVERLAY_FEATURES_OFF}`,
        stage: d('stage2'),
        workspaceDir: d('ws'),
        workspaceMount: '/workspace',
        lowers: [{ src: lower, dst: bound }],
      }),
    )
    return { overlay, uidRanges }
  } finally {
    fs.rmSync(root, { recursive: true, force: true })
  }
}

export type ImageReport = { support: HostImageSupport; available: string[]; missing: string[] }

/**
 * The probe in the start-up report's terms: what image workspaces get, and sentences saying so.
 * `probe` is a reason when no workspace on an image can start here whatever the kernel allows.
 */
export function imageReport(probe: ImageProbe | string, rootRanges: number): ImageReport {
  if (typeof probe === 'string') return { support: { overlay: false, uidRanges: false, rootRanges }, available: [], missing: [`Workspaces on an image cannot start: ${probe}.`] }
  const { overlay, uidRanges } = probe
  const available: string[] = []
  const missing: string[] = []
  if (overlay === null) available.push("Workspaces on an image run on an overlay of the node's cached layers under a writable layer of their own.")
  else missing.push(`Workspaces on an image cannot start: overlayfs cannot mount the image's layers here (${overlay}); it needs Linux 5.11 or later.`)
  if (overlay === null && uidRanges === null) {
    if (rootRanges > 0) available.push(`Up to ${rootRanges} workspaces on an image run as root inside, each on 65536 host uids of its own shown the image's layers through idmapped mounts (WARREN_SANDBOX_ROOT_RANGES).`)
    else available.push('Workspaces on an image could run as root inside (idmapped layers work here); WARREN_SANDBOX_ROOT_RANGES is 0, so they run as their unprivileged uid.')
  } else if (overlay === null) {
    const then = rootRanges > 0 ? 'each workspace on an image fails to start while WARREN_SANDBOX_ROOT_RANGES is set' : 'they run as their unprivileged uid'
    missing.push(`Workspaces on an image cannot run as root inside: idmapped mounts of the image's layers fail here (${uidRanges}), so ${then}; root inside needs Linux 5.19 or later and a file system for the data folder that takes idmapped mounts (ext4, xfs, btrfs, tmpfs).`)
  }
  return { support: { overlay: overlay === null, uidRanges: overlay === null && uidRanges === null, rootRanges }, available, missing }
}
