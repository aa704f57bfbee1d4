import { spawn } from 'node:child_process'

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
export function run(cmd: string, args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d))
    child.on('error', reject)
    child.on('close', (code) => {
      if (code === 0) resolve(out)
      else reject(new NetCommandError(`${cmd} ${args.join(' ')}`, code, err))
    })
    child.stdin.on('error', () => {}) // the command may exit before reading; its exit code tells
    child.stdin.end(input ?? '')
  })
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
