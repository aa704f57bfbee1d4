// What a service on `prefix` may leave on the host: network namespaces, cgroups, its nftables table; and
// removing a data folder a killed service left workspace file systems mounted in.
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'

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

/**
 * Removes a service's data folder, unmounting first what is mounted inside it (deepest first,
 * lazily): a service killed outright leaves its workspaces' file systems mounted there (the next
 * start on that folder would take them on), and a folder with a mount in it cannot be removed.
 */
export function removeDataDir(dir: string): void {
  const root = fs.existsSync(dir) ? fs.realpathSync(dir) : dir
  const points = fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((p): p is string => p !== undefined && (p === root || p.startsWith(`${root}/`)))
    .sort((a, b) => b.length - a.length)
  for (const p of points) run('umount', ['-l', '--', p])
  fs.rmSync(dir, { recursive: true, force: true })
}
