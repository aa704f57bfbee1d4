import { runOnHost } from './spawner.ts'

/** A failed host command, with what it printed: `ip` and `nft` explain themselves on stderr. */
export class NetCommandError extends Error {
  readonly stderr: string
  constructor(command: string, code: number | null, stderr: string) {
    super(`${command} failed (exit ${code}): ${stderr.trim() || 'no output'}`)
    this.stderr = stderr
  }
}

/**
 * Runs a host command (ip, nft) without a shell, feeding `input` on stdin: nft scripts go in
 * whole through `nft -f -` so a ruleset change is one atomic transaction.
 */
export async function run(cmd: string, args: string[], input?: string): Promise<string> {
  // Through the spawner: a fork of the service would stall its event loop for every one of them.
  const r = await runOnHost(cmd, args, { input })
  if (r.code === 0) return r.stdout
  throw new NetCommandError(`${cmd} ${args.join(' ')}`, r.code, r.stderr)
}

/** Like run, for clean-up steps whose target may already be gone: never rejects. */
export async function runQuiet(cmd: string, args: string[], input?: string): Promise<boolean> {
  try {
    await run(cmd, args, input)
    return true
  } catch {
    return false
  }
}
