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
