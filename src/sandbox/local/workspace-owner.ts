import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { WRAPPER_ENV } from './bubblewrap.ts'

const run = promisify(execFile)

/** Creates the workspace folder if needed and gives it (and, when it changed hands, its content) to `uid`. */
export async function prepareWorkspace(dir: string, uid: number, chown: string): Promise<void> {
  fs.mkdirSync(dir, { recursive: true })
  const st = fs.lstatSync(dir)
  if (!st.isDirectory()) throw new Error(`${dir} is not a folder`)
  if (st.uid !== uid || st.gid !== uid) {
    // -h -P: never follow a link the agent left in the tree.
    if (fs.readdirSync(dir).length === 0) fs.chownSync(dir, uid, uid)
    else await run(chown, ['-R', '-h', '-P', `${uid}:${uid}`, '--', dir], { env: WRAPPER_ENV })
  }
  // Other host users have no business in a workspace.
  fs.chmodSync(dir, 0o700)
}

/** Whether `uid` (with no groups but its own) may search every folder above `dir`. */
export function reachableBy(dir: string, uid: number): boolean {
  for (let d = path.dirname(dir); ; d = path.dirname(d)) {
    const st = fs.statSync(d)
    const bit = st.uid === uid ? 0o100 : st.gid === uid ? 0o010 : 0o001
    if (!(st.mode & bit)) return false
    if (d === '/') return true
  }
}

/** The owner of `dir`, or -1 when it does not exist yet. */
export function ownerOf(dir: string): number {
  try {
    return fs.statSync(dir).uid
  } catch {
    return -1
  }
}

/** Without cgroups the uid range is what marks a sandbox process: kills those of no live sandbox. */
export function killStrays(base: number, count: number, keep: (uid: number) => boolean): void {
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const m = /^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${name}/status`, 'utf8'))
      const uid = m ? Number(m[1]) : -1
      if (uid >= base && uid < base + count && !keep(uid)) process.kill(Number(name), 'SIGKILL')
    } catch {
      /* exited */
    }
  }
}
