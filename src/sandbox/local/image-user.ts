import fs from 'node:fs'
import { SandboxImageError } from '../sandbox.ts'
import { ROOT_RANGE_SIZE } from './idmap-root.ts'
import { opaqueFolders } from './layer-opaque.ts'

/**
 * The image's `User` (its config's `User`: `name`, `uid`, `uid:gid`, `name:group`, `uid:group`,
 * `name:gid`) as the uid and gid a root-inside sandbox's commands run as, the way Docker resolves
 * it: a name from the image's /etc/passwd (its gid, unless a group is named), a group name from
 * /etc/group, a number as it is (its passwd entry's gid when it has one, else 0). No supplementary
 * groups. An empty User is root.
 *
 * The files are read from the overlay's folders as the overlay would show them (top first: the
 * sandbox's own layer, then the image's layers down), before the sandbox starts: a whiteout of
 * `etc` or of the file hides the lower ones, as does an opaque `etc`. Each layer is the registry's
 * (or the agent's) content, so nothing is followed: `etc` and the file are opened with O_NOFOLLOW
 * under the layer's folder, a link or anything but a regular file is read as absent, and at most
 * MAX_BYTES are read.
 */
export type ImageUser = { uid: number; gid: number }

const MAX_BYTES = 1024 * 1024
const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = fs.constants

export async function resolveImageUser(user: string, folders: string[]): Promise<ImageUser> {
  const spec = user.trim()
  if (spec === '') return { uid: 0, gid: 0 }
  const [name = '', group] = spec.split(':', 2) as [string, string | undefined]
  const number = (s: string) => (/^\d{1,10}$/.test(s) ? Number(s) : null)
  const passwd = await readEtc(folders, 'passwd')
  const entries = (passwd ?? '').split('\n').map((l) => l.split(':')).filter((f) => f.length >= 4)
  const byName = entries.find((f) => f[0] === name)
  const asNumber = number(name)
  let uid: number
  let gid = 0
  if (asNumber !== null) {
    uid = asNumber
    const entry = entries.find((f) => number(f[2]!) === uid)
    if (entry) gid = number(entry[3]!) ?? 0
  } else if (byName && number(byName[2]!) !== null) {
    uid = number(byName[2]!)!
    gid = number(byName[3]!) ?? 0
  } else {
    throw new SandboxImageError(`the image's User ${JSON.stringify(spec)} names a user its /etc/passwd does not have`)
  }
  if (group !== undefined && group !== '') {
    const g = number(group)
    if (g !== null) gid = g
    else {
      const groups = ((await readEtc(folders, 'group')) ?? '').split('\n').map((l) => l.split(':'))
      const found = groups.find((f) => f.length >= 3 && f[0] === group && number(f[2]!) !== null)
      if (!found) throw new SandboxImageError(`the image's User ${JSON.stringify(spec)} names a group its /etc/group does not have`)
      gid = number(found[2]!)!
    }
  }
  // Inside a root range only 0…65535 are ids of the workspace's own (65536 is the sandbox's host uid).
  if (uid >= ROOT_RANGE_SIZE || gid >= ROOT_RANGE_SIZE) throw new SandboxImageError(`the image's User ${JSON.stringify(spec)} is ${uid}:${gid}, past the ${ROOT_RANGE_SIZE} ids a workspace has`)
  return { uid, gid }
}

/** `/etc/<file>` as the overlay of `folders` (top first) shows it; null when absent. */
async function readEtc(folders: string[], file: string): Promise<string | null> {
  for (const top of folders) {
    const found = lookIn(top, file)
    if (found === 'hidden') return null
    if (typeof found === 'object' && found !== null) return found.text
    // An `etc` of this layer that is opaque hides every lower one.
    if (found === 'folder' && (await opaqueFolders(top, ['etc'])).length > 0) return null
  }
  return null
}

/** What one layer has: the file's text, `hidden` (a whiteout), `folder` (an etc without the file), or null (no etc). */
function lookIn(top: string, file: string): { text: string } | 'hidden' | 'folder' | null {
  let root: number
  try {
    root = fs.openSync(top, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
  } catch {
    return null // a layer with no folder (an upper never made yet)
  }
  try {
    const etc = entry(root, 'etc')
    if (etc === 'whiteout') return 'hidden'
    if (etc !== 'dir') return etc === null ? null : 'hidden' // a link or file at /etc hides the lower etc, and is not followed
    let dir: number
    try {
      dir = fs.openSync(`/proc/self/fd/${root}/etc`, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    } catch {
      return null // changed under us
    }
    try {
      const kind = entry(dir, file)
      if (kind === null) return 'folder'
      if (kind !== 'file') return 'hidden'
      const fd = fs.openSync(`/proc/self/fd/${dir}/${file}`, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
      try {
        if (!fs.fstatSync(fd).isFile()) return 'hidden'
        const buf = Buffer.alloc(MAX_BYTES)
        const n = fs.readSync(fd, buf, 0, MAX_BYTES, 0)
        return { text: buf.subarray(0, n).toString('utf8') }
      } finally {
        fs.closeSync(fd)
      }
    } finally {
      fs.closeSync(dir)
    }
  } finally {
    fs.closeSync(root)
  }
}

function entry(dir: number, name: string): 'dir' | 'file' | 'whiteout' | 'other' | null {
  const st = fs.lstatSync(`/proc/self/fd/${dir}/${name}`, { throwIfNoEntry: false })
  if (!st) return null
  if (st.isDirectory()) return 'dir'
  if (st.isFile()) return 'file'
  if (st.isCharacterDevice() && st.rdev === 0) return 'whiteout'
  return 'other'
}
