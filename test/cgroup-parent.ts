import fs from 'node:fs'
import path from 'node:path'
import { detectCgroups } from '../src/sandbox/local/cgroups.ts'

/** Removes a test's own (empty by then) cgroup parent from every hierarchy of this host. */
export function removeCgroupParent(parent: string): void {
  const host = detectCgroups()
  const roots = host.version === 1 ? [...new Set(host.mounts.values())] : host.version === 2 ? [host.root] : []
  for (const root of roots) {
    try {
      fs.rmdirSync(path.join(root, parent))
    } catch {
      /* never made, or still held: left for the next clean-up */
    }
  }
}
