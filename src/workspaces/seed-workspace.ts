import type { Db } from '../db/database.ts'
import { listSeedFiles } from '../files/seed-files.store.ts'
import type { Sandbox } from '../sandbox/sandbox.ts'
import type { WorkspaceRecord } from './workspaces.store.ts'

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
  gitBaseUrl: string,
): Promise<SeedOutcome> {
  const problems: SeedProblem[] = []
  let repo = env.repo
  if (repo) repo = await cloneRepo(repo, sandbox, gitBaseUrl)
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
    // It runs as every command of the sandbox runs: in an image workspace with root inside, as its
    // root (so that it may apt-get install), or as the image's User when it names one (as a
    // devcontainer's lifecycle scripts run as its user; /workspace is that user's then).
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
 * The clone goes through the seam (Sandbox.cloneRepo) rather than a command in the sandbox: it
 * keeps today's behaviour, a clone from the service's side of the network before any setup
 * script runs, whatever the workspace's egress policy allows.
 */
async function cloneRepo(repo: NonNullable<WorkspaceRecord['repo']>, sandbox: Sandbox, gitBaseUrl: string): Promise<NonNullable<WorkspaceRecord['repo']>> {
  try {
    const cloned = await sandbox.cloneRepo({ url: `${gitBaseUrl}/${repo.full_name}.git`, ...(repo.branch ? { branch: repo.branch } : {}), timeoutMs: CLONE_TIMEOUT_MS })
    if (!cloned) return repo // already there (a restore): never clone over the agent's work
    return { ...repo, branch: cloned.branch, clone_error: null }
  } catch (err) {
    return { ...repo, clone_error: (err as Error).message }
  }
}
