import fs from 'node:fs'

/** Whether `dir` is missing or an empty folder: what an unpack or a materialize may fill. */
export function isEmptyOrMissing(dir: string): boolean {
  try {
    const st = fs.lstatSync(dir)
    return st.isDirectory() && fs.readdirSync(dir).length === 0
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return true
    throw err
  }
}
