import { SandboxPathError } from '../../sandbox/sandbox.ts'
import { cancelledOutcome, checkArgs, failed, schemaOf, type Args, type Fields } from './args.ts'
import type { BuiltinTool, ToolContext, ToolOutcome } from './builtin-tool.ts'

type Definition<F extends Fields> = {
  name: string
  description: string
  kind: 'reads' | 'writes'
  fields: F
  run(args: Args<F>, ctx: ToolContext): Promise<ToolOutcome>
}

/**
 * A built-in tool from its declaration. Everything the model can cause becomes an outcome it
 * reads (bad arguments, a path the sandbox refuses, a file system error such as ENOSPC); only a
 * sandbox that is gone or broken (SandboxUnavailableError) or a bug rejects, for the agent loop
 * to end the turn on.
 */
export function defineTool<const F extends Fields>(d: Definition<F>): BuiltinTool {
  return {
    name: d.name,
    description: d.description,
    kind: d.kind,
    parameters: schemaOf(d.fields),
    async run(raw, ctx) {
      const checked = checkArgs(d.fields, raw)
      if (!checked.ok) return failed(`Invalid arguments for ${d.name}: ${checked.error}.`, 'invalid arguments')
      if (ctx.signal.aborted) return cancelledOutcome()
      try {
        return await d.run(checked.args, ctx)
      } catch (err) {
        if (err instanceof SandboxPathError) return failed(`Refused: ${err.message}.`, 'refused')
        const code = (err as NodeJS.ErrnoException)?.code
        if (typeof code === 'string' && /^(E[A-Z]+|ERR_FS_[A-Z_]+)$/.test(code)) return failed(`${d.name} failed: ${(err as Error).message}`, `failed (${code})`)
        throw err
      }
    },
  }
}
