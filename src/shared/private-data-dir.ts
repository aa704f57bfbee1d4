import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'

/** Read, write and enter for the service's user alone. */
export const PRIVATE_DIR_MODE = 0o700
/** Read and write for the service's user alone. */
export const PRIVATE_FILE_MODE = 0o600

/**
 * Folders the service keeps in its data folder beside its files (blob stores). The workspaces
 * folder is not one: its files belong to the sandboxes' users and are theirs to set.
 */
const OWN_FOLDERS = ['artifacts', 'snapshots']

/**
 * Makes the data folder the service's user's alone, whatever the umask: it holds conversations,
 * tool output, the store and the key that seals its secrets. Creates it (0700) when missing, and
 * tightens what an earlier version (or an operator) left open to others: the folder itself, the
 * files at its top (the SQLite file and its -wal and -shm, the key file) and the blob stores'
 * folders. Answers the paths it had to tighten, for the caller to say so.
 */
export function privateDataDir(dir: string): string[] {
  fs.mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE })
  const tightened: string[] = []
  const tighten = (file: string, mode: number) => {
    // lstat: a link placed here is not followed to tighten (or loosen) what it points at.
    const st = fs.lstatSync(file, { throwIfNoEntry: false })
    if (!st || st.isSymbolicLink() || (st.mode & 0o077) === 0) return
    fs.chmodSync(file, st.mode & mode & 0o777)
    tightened.push(file)
  }
  tighten(dir, PRIVATE_DIR_MODE)
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name)
    if (entry.isFile()) tighten(file, PRIVATE_FILE_MODE)
    else if (entry.isDirectory() && OWN_FOLDERS.includes(entry.name)) tighten(file, PRIVATE_DIR_MODE)
  }
  return tightened
}

/**
 * Creates an empty file for the service's user alone unless it exists: SQLite gives the -wal and
 * -shm files it makes beside a database the database file's own mode, so a database file made
 * private first keeps them private too.
 */
export function ensurePrivateFile(file: string): void {
  try {
    fs.closeSync(fs.openSync(file, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY, PRIVATE_FILE_MODE))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
  }
}

/**
 * Writes `bytes` as `file`, for the service's user alone, whole or not at all: into a fresh file
 * under `tmpDir` (same file system) first, then renamed into place, its folder made as needed.
 * Synchronous: for the many small files of a batch, where a promise each waits on the thread pool.
 */
export function writePrivateFileWhole(tmpDir: string, file: string, bytes: Buffer): void {
  const part = path.join(tmpDir, randomBytes(12).toString('hex'))
  try {
    fs.writeFileSync(part, bytes, { flag: 'wx', mode: PRIVATE_FILE_MODE })
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: PRIVATE_DIR_MODE })
    fs.renameSync(part, file)
  } catch (err) {
    fs.rmSync(part, { force: true })
    throw err
  }
}
