// What a service on `prefix` may leave on the host: network namespaces, cgroups, its nftables table.
import { execFileSync } from 'node:child_process'

const run = (cmd: string, args: string[]) => {
  try {
    return execFileSync(cmd, args, { stdio: ['ignore', 'pipe', 'ignore'] }).toString()
  } catch {
    return ''
  }
}

/** Names of what carries `prefix` on this host (empty: nothing left). */
export function leftOnHost(prefix: string): string[] {
  const namespaces = run('ip', ['netns', 'list']).split('\n').map((l) => l.split(' ')[0]!).filter((n) => n.startsWith(`${prefix}-`))
  const cgroups = run('find', ['/sys/fs/cgroup', '-maxdepth', '3', '-type', 'd', '-name', `warren-${prefix}-*`]).split('\n').filter(Boolean)
  const tables = run('nft', ['list', 'tables']).split('\n').filter((l) => l.trim().endsWith(` warren_${prefix}`))
  return [...namespaces.map((n) => `netns ${n}`), ...cgroups.map((c) => `cgroup ${c}`), ...tables.map((t) => `nft ${t.trim()}`)]
}
