import fs from 'node:fs'
import path from 'node:path'

export type Controller = 'memory' | 'pids' | 'cpu' | 'freezer'
export const CONTROLLERS: Controller[] = ['memory', 'pids', 'cpu', 'freezer']

/** What the host's cgroup file system offers, read from /proc/self/mountinfo. */
export type CgroupHost =
  | { version: 1; mounts: Map<Controller, string>; memsw: boolean }
  | { version: 2; root: string; controllers: Set<Controller>; freeze: boolean; kill: boolean }
  | { version: null; reason: string }

export function detectCgroups(mountinfo = readText('/proc/self/mountinfo') ?? ''): CgroupHost {
  const v1 = new Map<Controller, string>()
  let v2: string | null = null
  for (const line of mountinfo.split('\n')) {
    const [left, right] = line.split(' - ')
    if (!left || !right) continue
    const mountPoint = left.split(' ')[4]
    const [fsType, , superOpts = ''] = right.split(' ')
    if (!mountPoint) continue
    if (fsType === 'cgroup2') {
      // A hybrid host mounts an (often empty) unified tree beside v1; the pure-v2 mount wins.
      if (v2 === null || mountPoint === '/sys/fs/cgroup') v2 = mountPoint
    } else if (fsType === 'cgroup') {
      for (const opt of superOpts.split(',')) {
        if ((CONTROLLERS as string[]).includes(opt) && !v1.has(opt as Controller) && writable(mountPoint)) {
          v1.set(opt as Controller, mountPoint)
        }
      }
    }
  }
  if (v1.size > 0) {
    const mem = v1.get('memory')
    return { version: 1, mounts: v1, memsw: mem !== undefined && fs.existsSync(path.join(mem, 'memory.memsw.limit_in_bytes')) }
  }
  if (v2 !== null && writable(v2)) {
    const listed = (readText(path.join(v2, 'cgroup.controllers')) ?? '').trim().split(/\s+/)
    const controllers = new Set(CONTROLLERS.filter((c) => listed.includes(c)))
    // The root group has neither file; any non-root group tells us what the kernel supports.
    const probe = ownV2Group(v2)
    const has = (file: string) => (probe ? fs.existsSync(path.join(probe, file)) : kernelAtLeast(file === 'cgroup.kill' ? [5, 14] : [5, 2]))
    return { version: 2, root: v2, controllers, freeze: has('cgroup.freeze'), kill: has('cgroup.kill') }
  }
  return { version: null, reason: v2 || v1.size ? 'the cgroup file system is read-only' : 'no cgroup file system is mounted' }
}

/** Names under `<hierarchy>/<parent>/` that start with `prefix`, across every hierarchy. */
export function listGroups(host: CgroupHost, parent: string, prefix: string): string[] {
  const roots = host.version === 1 ? [...new Set(host.mounts.values())] : host.version === 2 ? [host.root] : []
  const names = new Set<string>()
  for (const root of roots) {
    let entries: fs.Dirent[] = []
    try {
      entries = fs.readdirSync(path.join(root, parent), { withFileTypes: true })
    } catch {
      continue
    }
    for (const e of entries) if (e.isDirectory() && e.name.startsWith(prefix)) names.add(e.name)
  }
  return [...names]
}

function ownV2Group(root: string): string | null {
  const line = (readText('/proc/self/cgroup') ?? '').split('\n').find((l) => l.startsWith('0::'))
  const rel = line?.slice(3).trim()
  return rel && rel !== '/' ? path.join(root, rel) : null
}

function kernelAtLeast([maj, min]: [number, number]): boolean {
  const [a = 0, b = 0] = (readText('/proc/sys/kernel/osrelease') ?? '').split('.').map((s) => parseInt(s, 10))
  return a > maj || (a === maj && b >= min)
}

function writable(dir: string): boolean {
  try {
    fs.accessSync(dir, fs.constants.W_OK)
    return true
  } catch {
    return false
  }
}

export function readText(file: string): string | null {
  try {
    return fs.readFileSync(file, 'utf8')
  } catch {
    return null
  }
}

export function safeReaddir(dir: string): fs.Dirent[] {
  try {
    return fs.readdirSync(dir, { withFileTypes: true })
  } catch {
    return []
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))
