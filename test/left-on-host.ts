// What a service on `prefix` may leave on the host: network namespaces, cgroups, its nftables table.
import { execFileSync } from 'node:child_process'

/**
 * What the command printed, even when it failed: find exits 1 when a directory it was about to
 * read vanished (another test's sandbox going away beside this one), and what it found elsewhere
 * still stands.
 */
const run = (cmd: string, args: string[]) => {
  try {
    return execFileSync(cmd, args, { stdio: ['ignore', 'pipe', 'ignore'] }).toString()
  } catch (err) {
    return (err as { stdout?: Buffer | null }).stdout?.toString() ?? ''
  }
}

/** Names of what carries `prefix` on this host (empty: nothing left). */
export function leftOnHost(prefix: string): string[] {
  const namespaces = run('ip', ['netns', 'list']).split('\n').map((l) => l.split(' ')[0]!).filter((n) => n.startsWith(`${prefix}-`))
  const cgroups = run('find', ['/sys/fs/cgroup', '-maxdepth', '3', '-ignore_readdir_race', '-type', 'd', '-name', `warren-${prefix}-*`]).split('\n').filter(Boolean)
  const tables = run('nft', ['list', 'tables']).split('\n').filter((l) => l.trim().endsWith(` warren_${prefix}`))
  return [...namespaces.map((n) => `netns ${n}`), ...cgroups.map((c) => `cgroup ${c}`), ...tables.map((t) => `nft ${t.trim()}`)]
}
