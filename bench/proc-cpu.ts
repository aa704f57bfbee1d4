import fs from 'node:fs'

/** User + system CPU milliseconds a process has used so far (its own, not its children's), from /proc. */
export function cpuMs(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100
}
