import { execFile } from 'node:child_process'
import fs from 'node:fs/promises'
import { promisify } from 'node:util'
import type { Db } from '../db/database.ts'
import { listSeedFiles } from '../files/seed-files.store.ts'
import type { Sandbox } from '../sandbox/sandbox.ts'
import type { WorkspaceRecord } from './workspaces.store.ts'

const run = promisify(execFile)
const CLONE_TIMEOUT_MS = 5 * 60_000
const SETUP_TIMEOUT_MS = 10 * 60_000

export type SeedProblem = { message: string; path?: string }
export type SeedOutcome = { problems: SeedProblem[]; repo: WorkspaceRecord['repo'] }

/**
 * What a workspace starts with, done once when it first comes up: the repository clone, then the
 * seed files that are not already there, then the template's setup script. A failure of one part
 * is reported and the rest goes on: the session stays open.
 */
export async function seedWorkspace(
  db: Db,
  sessionId: string,
  env: WorkspaceRecord,
  sandbox: Sandbox,
  workspaceDir: string,
  gitBaseUrl: string,
): Promise<SeedOutcome> {
  const problems: SeedProblem[] = []
  let repo = env.repo
  if (repo) repo = await cloneRepo(repo, workspaceDir, gitBaseUrl)
  if (repo?.clone_error) problems.push({ message: `The repository ${repo.full_name} could not be cloned: ${repo.clone_error}` })

  for (const f of await listSeedFiles(db, sessionId)) {
    try {
      if ((await sandbox.readFile(f.path)) !== null) continue
      await sandbox.writeFile(f.path, f.content, f.mode)
    } catch (err) {
      problems.push({ path: f.path, message: `The file "${f.path}" could not be written: ${(err as Error).message}` })
    }
  }

  if (env.setup) {
    const r = await sandbox.exec({ command: env.setup, timeoutMs: SETUP_TIMEOUT_MS })
    if (r.exitCode !== 0) {
      const tail = r.stderr.toString('utf8').trim().split('\n').slice(-5).join('\n')
      const why = r.timedOut ? 'timed out' : r.exitCode === null ? `was killed (${r.signal})` : `exited with ${r.exitCode}`
      problems.push({ message: `The template's setup script ${why}${tail ? `: ${tail}` : ''}` })
    }
  }
  return { problems, repo }
}

/**
 * Clones on the host, straight into the (still empty) workspace folder, then hands every file to
 * the workspace's owner. `chown -h` never follows a link the repository may carry.
 */
async function cloneRepo(repo: NonNullable<WorkspaceRecord['repo']>, workspaceDir: string, gitBaseUrl: string): Promise<NonNullable<WorkspaceRecord['repo']>> {
  const url = `${gitBaseUrl}/${repo.full_name}.git`
  const gitEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin', GIT_TERMINAL_PROMPT: '0', HOME: workspaceDir, GIT_CONFIG_NOSYSTEM: '1' }
  try {
    const entries = await fs.readdir(workspaceDir)
    if (entries.length > 0) return repo // already there (a restore): never clone over the agent's work
    await run('git', ['clone', '--quiet', ...(repo.branch ? ['--branch', repo.branch] : []), '--', url, workspaceDir], { env: gitEnv, timeout: CLONE_TIMEOUT_MS })
    const branch = repo.branch ?? (await run('git', ['-c', `safe.directory=${workspaceDir}`, '-C', workspaceDir, 'rev-parse', '--abbrev-ref', 'HEAD'], { env: gitEnv })).stdout.trim()
    await run('chown', ['-R', '-h', `--reference=${workspaceDir}`, workspaceDir])
    return { ...repo, branch, clone_error: null }
  } catch (err) {
    const e = err as { stderr?: string; message: string; killed?: boolean }
    const reason = e.killed ? 'the clone timed out' : (e.stderr?.trim().split('\n').filter(Boolean).pop() ?? e.message)
    // A half-made clone is removed so that the workspace starts clean.
    await fs.rm(`${workspaceDir}/.git`, { recursive: true, force: true }).catch(() => {})
    return { ...repo, clone_error: reason.replace(/^fatal: /, '') }
  }
}
