import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { systemRoots, type Tools } from './bubblewrap.ts'
import { detectCgroups, type CgroupHost } from './cgroups.ts'
import { filterArch } from './seccomp.ts'

export type HostProbe = {
  /** Null when a required program is missing (see fatal). */
  tools: Tools | null
  cgroups: CgroupHost
  /** Why no sandbox can start here; empty when they can. */
  fatal: string[]
  available: string[]
  missing: string[]
}

const SEARCH = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin']

function which(name: string): string | null {
  for (const dir of SEARCH) if (executable(path.join(dir, name))) return path.join(dir, name)
  return null
}

function executable(p: string): string | null {
  try {
    fs.accessSync(p, fs.constants.X_OK)
    return fs.statSync(p).isFile() ? p : null
  } catch {
    return null
  }
}

/**
 * What this host allows the local provider to do, in plain sentences. Runs one throw-away
 * sandbox as `probeUid` to prove bubblewrap can create user namespaces as an unprivileged user.
 */
export function probeHost(opts: { probeUid: number; bwrap?: string; cgroups?: boolean }): HostProbe {
  const available: string[] = []
  const missing: string[] = []
  const fatal: string[] = []
  const found = {
    sh: which('sh'), bwrap: opts.bwrap ? executable(opts.bwrap) : which('bwrap'), setpriv: which('setpriv'), nsenter: which('nsenter'),
    unshare: which('unshare'), mount: which('mount'), env: which('env'), sleep: which('sleep'), chown: which('chown'),
    perl: which('perl'),
  }
  const absent = Object.entries(found).filter(([, p]) => p === null).map(([n]) => n)
  const ip = which('ip')
  let tools: Tools | null = null
  if (absent.length) {
    const pkgs = absent.map((n) => (n === 'bwrap' ? 'bubblewrap' : n)).join(', ')
    fatal.push(`Workspaces cannot start: ${pkgs} ${absent.length > 1 ? 'are' : 'is'} not installed (bubblewrap, util-linux and perl-base provide them).`)
  } else {
    tools = { ...(found as Omit<Tools, 'ip'>), ip }
  }
  if (process.getuid?.() !== 0) {
    fatal.push('Workspaces cannot start: the service does not run as root, so it cannot give each workspace its own unprivileged user or set cgroup limits.')
  }
  if (!filterArch()) {
    fatal.push(`Workspaces cannot start: Warren has no syscall filter for this architecture (${process.arch}); it has one for x64 and arm64.`)
  }
  if (tools && fatal.length === 0) {
    const r = spawnSync(
      tools.setpriv,
      ['--reuid', String(opts.probeUid), '--regid', String(opts.probeUid), '--clear-groups', '--no-new-privs', '--',
        tools.bwrap, '--unshare-user', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-net', '--disable-userns',
        '--cap-drop', 'ALL', '--die-with-parent', ...systemRoots(), '--proc', '/proc', '--dev', '/dev', '--', tools.sleep, '0'],
      { env: { PATH: '/usr/bin:/bin' }, timeout: 10_000, encoding: 'utf8' },
    )
    if (r.status === 0) {
      available.push(`bubblewrap runs workspaces as unprivileged users with their own user, pid, ipc, uts, mount and network namespaces (${tools.bwrap}).`)
      available.push('Every workspace process runs under no_new_privs and a syscall filter, and none may make a user namespace of its own.')
    } else {
      const why = (r.stderr || r.error?.message || `exit ${r.status}`).trim()
      fatal.push(`Workspaces cannot start: bubblewrap cannot create a user namespace as an unprivileged user (${why}).${userNsHint()}`)
    }
  }
  const cg: CgroupHost = opts.cgroups === false ? { version: null, reason: 'cgroups are turned off for this provider' } : detectCgroups()
  if (cg.version === null) {
    missing.push(`No cgroups (${cg.reason}): workspaces run without memory, process or CPU limits, a fork bomb can exhaust the host, and pausing falls back to stopping every process with SIGSTOP.`)
  } else {
    const have = cg.version === 1 ? new Set(cg.mounts.keys()) : cg.controllers
    const limits = (['memory', 'pids', 'cpu'] as const).filter((c) => have.has(c))
    const lacking = (['memory', 'pids', 'cpu'] as const).filter((c) => !have.has(c))
    available.push(`cgroup v${cg.version} limits ${limits.length ? limits.join(', ') : 'nothing'} per workspace.`)
    if (lacking.includes('memory')) missing.push('No memory controller: a workspace can use all the host\'s memory.')
    if (lacking.includes('pids')) missing.push('No pids controller: a fork bomb in a workspace can exhaust the host\'s process table.')
    if (lacking.includes('cpu')) missing.push('No cpu controller: a workspace can use every core.')
    const freezer = cg.version === 1 ? have.has('freezer') : cg.freeze
    if (freezer) available.push(`Pausing uses the cgroup freezer (${cg.version === 1 ? 'freezer.state' : 'cgroup.freeze'}).`)
    else missing.push('No cgroup freezer: pausing stops each process with SIGSTOP, which a process can observe.')
    if (cg.version === 1 && have.has('memory') && !cg.memsw) {
      missing.push('No memory+swap accounting (memory.memsw): on a host with swap a workspace can page out past its memory limit.')
    }
  }
  if (which('inotifywait')) available.push('inotifywait watches each workspace, so finding what a command changed does not walk the whole tree.')
  else missing.push('inotifywait (inotify-tools) is missing: every bash call walks the whole workspace twice to find what it changed, which grows with the workspace.')
  if (tools?.ip) available.push('iproute2 is present for workspace network namespaces.')
  else missing.push('iproute2 (ip) is missing: workspaces can only run without any network.')
  return { tools, cgroups: cg, fatal, available, missing }
}

function userNsHint(): string {
  const read = (f: string) => {
    try {
      return fs.readFileSync(f, 'utf8').trim()
    } catch {
      return null
    }
  }
  if (read('/proc/sys/kernel/unprivileged_userns_clone') === '0') return ' Set the sysctl kernel.unprivileged_userns_clone=1.'
  if (read('/proc/sys/user/max_user_namespaces') === '0') return ' Set the sysctl user.max_user_namespaces above 0.'
  if (read('/proc/sys/kernel/apparmor_restrict_unprivileged_userns') === '1') {
    return ' AppArmor restricts unprivileged user namespaces: set kernel.apparmor_restrict_unprivileged_userns=0 or add a profile for bwrap.'
  }
  return ''
}

/** A folder that exists on every Debian-like host and that bwrap never binds. */
export function pickStageDir(preferred?: string): string | null {
  for (const d of preferred ? [preferred] : ['/mnt', '/media', '/srv']) {
    try {
      if (fs.statSync(d).isDirectory()) return d
    } catch {
      /* next */
    }
  }
  return null
}
