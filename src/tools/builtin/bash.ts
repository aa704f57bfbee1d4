import { StringDecoder } from 'node:string_decoder'
import type { ChangeWindow, ExecResult, Sandbox } from '../../sandbox/sandbox.ts'
import type { ToolOutcome } from './builtin-tool.ts'
import { bashChanges } from './changes.ts'
import { defineTool } from './define.ts'
import { HeadTail, plural } from './text.ts'

const DEFAULT_TIMEOUT_S = 120
const MAX_TIMEOUT_S = 1800
/** The model gets at most 2× this many characters of output: the head and the tail. */
const HALF_OUTPUT = 15_000

/** Null when the workspace cannot be watched nor walked (it vanished): the call then reports no changes rather than failing. */
const openChanges = (sandbox: Sandbox): Promise<ChangeWindow | null> => sandbox.openChanges().catch(() => null)

function status(r: ExecResult, timeoutS: number): { line: string; short: string } {
  if (r.aborted) return { line: '[cancelled: the command was stopped]', short: 'cancelled' }
  if (r.timedOut) return { line: `[timed out after ${timeoutS} s; the command was killed]`, short: `timed out after ${timeoutS} s` }
  if (r.exitCode !== null) return { line: `[exit code: ${r.exitCode}]`, short: `exit ${r.exitCode}` }
  return { line: `[killed by signal ${r.signal ?? 'unknown'}]`, short: `killed by ${r.signal ?? 'a signal'}` }
}

export const bash = defineTool({
  name: 'bash',
  kind: 'writes',
  description:
    'Run a shell command (/bin/sh -c) in the workspace sandbox, starting in /workspace; stdout and stderr come back combined, followed by the exit code. ' +
    `It is killed after timeout_seconds (default ${DEFAULT_TIMEOUT_S}); run long-lived servers in the background (\`cmd > log 2>&1 &\`).`,
  fields: {
    command: { type: 'string', required: true, description: 'The command line to run.' },
    timeout_seconds: { type: 'number', minimum: 1, maximum: MAX_TIMEOUT_S, description: `Seconds before the command is killed. Default ${DEFAULT_TIMEOUT_S}, at most ${MAX_TIMEOUT_S}.` },
  },
  async run(args, ctx): Promise<ToolOutcome> {
    const timeoutS = args.timeout_seconds ?? DEFAULT_TIMEOUT_S
    const window = ctx.window ?? (await openChanges(ctx.sandbox))
    const acc = new HeadTail(HALF_OUTPUT)
    const take = (s: string) => {
      if (s === '') return
      acc.push(s)
      // A failing display callback must not take the command (or the service) down with it.
      try {
        ctx.onOutput?.(s)
        // The command's output is kept in `acc` whatever the display made of it.
      } catch {}
    }
    // One decoder per stream: a UTF-8 character split across chunks must not turn into garbage.
    const out = new StringDecoder('utf8')
    const err = new StringDecoder('utf8')
    let r: ExecResult
    try {
      r = await ctx.sandbox.exec(
        {
          command: args.command,
          cwd: ctx.mount,
          timeoutMs: Math.round(timeoutS * 1000),
          onStdout: (c) => take(out.write(c)),
          onStderr: (c) => take(err.write(c)),
        },
        ctx.signal,
      )
    } catch (e) {
      // An open window keeps noting changes: end it.
      void window?.close().catch(() => {}) // what it gathered is not read any more
      throw e
    }
    take(out.end())
    take(err.end())
    const found = window ? await window.close().catch(() => null) : null
    const changes = found ? await bashChanges(ctx, found) : []
    const s = status(r, timeoutS)
    const body = acc.total === 0 ? '(no output)\n' : acc.text()
    const output = `${body}${body.endsWith('\n') ? '' : '\n'}${s.line}`
    const outcome: ToolOutcome = {
      output,
      isError: r.aborted || r.timedOut || r.exitCode !== 0,
      summary: `${s.short} · ${plural(acc.lines, 'line')}`,
      changes,
    }
    if (r.aborted) outcome.cancelled = true
    return outcome
  },
})
