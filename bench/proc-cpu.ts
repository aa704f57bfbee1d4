import fs from 'node:fs'

/** User + system CPU milliseconds a process has used so far (its own, not its children's), from /proc. */
export function cpuMs(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100
}

/** The whole machine's CPU time so far, busy and total, in clock ticks summed over its cores (the `cpu` line of /proc/stat). */
export function machineTicks(): { busy: number; total: number } {
  const ticks = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number)
  const total = ticks.reduce((a, b) => a + b, 0)
  // idle and iowait are the 4th and 5th fields.
  return { busy: total - ticks[3]! - ticks[4]!, total }
}

/** CPU milliseconds of a process tree, split as bench/turn prints it. */
export type TreeCpu = { total: number; root: number; spawners: number }

/**
 * CPU milliseconds used so far by `root` and every live process under it (user + system), each with
 * what its children it already waited for used (cutime + cstime): a finished command is counted in
 * the shell or spawner that reaped it, a sandbox's orphans in the sandbox's init. `spawners`: the
 * processes among them whose command line holds `spawner-process` (their own time only).
 * Reading the same tree twice, the difference is what the whole tree used in between.
 */
export function treeCpuMs(root: number): TreeCpu {
  const stats = new Map<number, { ppid: number; own: number; reaped: number; spawner: boolean }>()
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    let f: string[]
    try {
      f = fs.readFileSync(`/proc/${name}/stat`, 'utf8').split(') ')[1]!.split(' ')
    } catch {
      continue // gone since the listing: its time is in its reaper's children's time now
    }
    const spawner = (() => {
      try {
        return fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').includes('spawner-process')
      } catch {
        return false // gone meanwhile
      }
    })()
    stats.set(Number(name), { ppid: Number(f[1]), own: Number(f[11]) + Number(f[12]), reaped: Number(f[13]) + Number(f[14]), spawner })
  }
  const children = new Map<number, number[]>()
  for (const [pid, s] of stats) children.set(s.ppid, [...(children.get(s.ppid) ?? []), pid])
  const tick = 1000 / 100
  let total = 0
  let spawners = 0
  for (const queue = [root]; queue.length > 0; ) {
    const pid = queue.pop()!
    const s = stats.get(pid)
    if (!s) continue
    total += s.own + s.reaped
    if (s.spawner) spawners += s.own
    queue.push(...(children.get(pid) ?? []))
  }
  const r = stats.get(root)
  return { total: total * tick, root: (r?.own ?? 0) * tick, spawners: spawners * tick }
}
