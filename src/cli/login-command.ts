import type { Command } from 'commander'
import readline from 'node:readline/promises'
import { ok, WarrenError } from '../../sdk/src/index.ts'
import { cliClient, saveConnection, type Connection } from './connection.ts'
import { note, out, report } from './print.ts'

/** The token from the flag, else one line of stdin (typed at a prompt, or piped: never in the shell's history). */
async function tokenFrom(flag: string | undefined): Promise<string> {
  if (flag) return flag
  const rl = readline.createInterface({ input: process.stdin, output: process.stdin.isTTY ? process.stderr : undefined, terminal: process.stdin.isTTY === true })
  try {
    return (await rl.question(process.stdin.isTTY ? 'Token: ' : '')).trim()
  } finally {
    rl.close()
  }
}

/**
 * The token's scopes, from GET /v1/health. Something other than Warren at the address (another web
 * service, a proxy's page) answers in a shape of its own: that is said, instead of failing on it.
 */
async function checkHealth(conn: Connection): Promise<{ scopes: string[] }> {
  const notWarren = () => new WarrenError(0, 'not_warren', `${conn.url} did not answer as a Warren service (GET /v1/health); check the address.`, null)
  let health: unknown
  try {
    health = await ok(cliClient(conn).api.GET('/v1/health'))
  } catch (err) {
    // A body that is not JSON, or a refusal without the error shape.
    if (err instanceof SyntaxError || (err instanceof WarrenError && err.code === 'unexpected_response')) throw notWarren()
    throw err
  }
  const h = health as { object?: unknown; scopes?: unknown } | null
  if (h?.object !== 'health' || !Array.isArray(h.scopes) || !h.scopes.every((x) => typeof x === 'string')) throw notWarren()
  return { scopes: h.scopes as string[] }
}

export function loginCommand(program: Command): void {
  program
    .command('login')
    .description('Check a token against the service and keep both for the client commands (the file is yours alone)')
    .option('--url <url>', 'the service address', process.env.WARREN_URL ?? 'http://127.0.0.1:8080')
    .option('--token <token>', 'the token (default: read from stdin)')
    .option('--json', 'print JSON')
    .action(async (o: { url: string; token?: string; json?: boolean }) => {
      try {
        const conn = { url: o.url.replace(/\/+$/, ''), token: await tokenFrom(o.token) }
        const health = await checkHealth(conn)
        // Saved only now: a sign-in that failed keeps the one saved before.
        const file = saveConnection(conn)
        if (o.json) out(JSON.stringify({ url: conn.url, scopes: health.scopes, config: file }))
        else note(`warren: signed in to ${conn.url} (scopes: ${health.scopes.join(', ')}); kept in ${file}`)
      } catch (err) {
        report(err)
      }
    })
}
