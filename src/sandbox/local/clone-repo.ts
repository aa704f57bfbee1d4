import { execFile } from 'node:child_process'
import fs from 'node:fs/promises'
import { promisify } from 'node:util'

const run = promisify(execFile)

/**
 * Clones on the host, as the service, straight into the (still empty) workspace folder, then hands
 * every file to the workspace's owner. `chown -h` never follows a link the repository may carry.
 * See Sandbox.cloneRepo.
 */
export async function cloneInto(dir: string, req: { url: string; branch?: string; timeoutMs: number }): Promise<{ branch: string } | null> {
  const gitEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin', GIT_TERMINAL_PROMPT: '0', HOME: dir, GIT_CONFIG_NOSYSTEM: '1' }
  if ((await fs.readdir(dir)).length > 0) return null
  try {
    await run('git', ['clone', '--quiet', ...(req.branch ? ['--branch', req.branch] : []), '--', req.url, dir], { env: gitEnv, timeout: req.timeoutMs })
    const branch = req.branch ?? (await run('git', ['-c', `safe.directory=${dir}`, '-C', dir, 'rev-parse', '--abbrev-ref', 'HEAD'], { env: gitEnv })).stdout.trim()
    await run('chown', ['-R', '-h', `--reference=${dir}`, dir])
    return { branch }
  } catch (err) {
    const e = err as { stderr?: string; message: string; killed?: boolean }
    const reason = e.killed ? 'the clone timed out' : (e.stderr?.trim().split('\n').filter(Boolean).pop() ?? e.message)
    // A half-made clone is removed so that the workspace starts clean.
    await fs.rm(`${dir}/.git`, { recursive: true, force: true }).catch(() => {}) // the clone's own failure is what is thrown
    throw new Error(reason.replace(/^fatal: /, ''), { cause: err })
  }
}
