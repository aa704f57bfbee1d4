import { ApiError } from '../errors.ts'
import type { DecodedFile } from '../files/decode-files.ts'
import { SandboxPathError, type Sandbox } from '../sandbox/sandbox.ts'
import { quote } from '../shared/sh-quote.ts'

/**
 * Writes every file or none: each path is checked inside the workspace (a symlink the agent
 * planted counts as leaving it), and a refusal part-way restores what the earlier writes replaced.
 */
export async function uploadFiles(sandbox: Sandbox, files: DecodedFile[]): Promise<void> {
  const undo: { path: string; before: Buffer | null }[] = []
  try {
    for (const f of files) {
      const before = await sandbox.readFile(f.path)
      // Recorded before the write: a write that fails part-way may already have truncated it.
      undo.push({ path: f.path, before })
      await sandbox.writeFile(f.path, f.content, f.mode)
    }
  } catch (err) {
    for (const u of undo.reverse()) {
      // The upload's own failure is what is thrown; a file the undo could not restore is the workspace's, as after any command.
      if (u.before) await sandbox.writeFile(u.path, u.before).catch(() => {})
      else await sandbox.exec({ command: `rm -f -- ${quote(u.path)}`, timeoutMs: 10_000 }).catch(() => {}) // likewise
    }
    if (err instanceof SandboxPathError) throw new ApiError('invalid_request', err.message)
    // The workspace's disk quota (or the host's disk) is full: the request asks for room there is not.
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOSPC' || code === 'EDQUOT') throw new ApiError('invalid_request', 'no room left in the workspace (its disk quota is full): nothing was written')
    throw err
  }
}
