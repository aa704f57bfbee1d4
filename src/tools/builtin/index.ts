import { bash } from './bash.ts'
import type { BuiltinTool } from './builtin-tool.ts'
import { editFile } from './edit-file.ts'
import { grep } from './grep.ts'
import { listFiles } from './list-files.ts'
import { readFile } from './read-file.ts'
import { writeFile } from './write-file.ts'

export type { BuiltinTool, FileChange, ToolContext, ToolOutcome } from './builtin-tool.ts'
export { ruleSubject } from './builtin-tool.ts'
export { compareSnapshots } from './compare-snapshots.ts'

/** The built-in tools the model sees, under their public names (decisions.md §3). */
export const BUILTIN_TOOLS: BuiltinTool[] = [bash, readFile, writeFile, editFile, listFiles, grep]

const byName = new Map(BUILTIN_TOOLS.map((t) => [t.name, t]))

export function builtinTool(name: string): BuiltinTool | undefined {
  return byName.get(name)
}
