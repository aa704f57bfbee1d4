// One shape for every client command: --url, --token and --json, a client built from them, and
// any failure printed the same way with a non-zero exit.
import type { Command } from 'commander'
import type { Warren } from '../../sdk/src/index.ts'
import { cliClient, resolveConnection, type Connection } from './connection.ts'
import { report } from './print.ts'

export type Common = { url?: string; token?: string; json?: boolean }
export type Context = { sdk: Warren; conn: Connection; json: boolean }

/** Adds a client subcommand to `parent`; `run` gets the positional arguments, the options and a client. */
export function clientCommand<O extends object>(parent: Command, spec: string, description: string, run: (args: string[], opts: O & Common, ctx: Context) => Promise<number | void>): Command {
  const cmd = parent.command(spec).description(description)
  cmd.option('--json', 'print JSON (for scripts)').option('--url <url>', 'the service address (default: WARREN_URL, then `warren login`)').option('--token <token>', 'the token (default: WARREN_TOKEN, then `warren login`)')
  cmd.action(async (...given: unknown[]) => {
    // Commander passes the positional arguments, then the options, then the command.
    const args = given.slice(0, -2).flat().filter((a): a is string => typeof a === 'string')
    const opts = given[given.length - 2] as O & Common
    try {
      const conn = resolveConnection(opts)
      const code = await run(args, opts, { sdk: cliClient(conn), conn, json: opts.json === true })
      if (typeof code === 'number') process.exitCode = code
    } catch (err) {
      report(err)
    }
  })
  return cmd
}
