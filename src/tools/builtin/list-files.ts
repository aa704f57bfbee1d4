import { failed } from './args.ts'
import { defineTool } from './define.ts'
import { globMatcher } from './glob-match.ts'
import { shown, workspacePath } from './paths.ts'
import { plural } from './text.ts'

const MAX_ENTRIES = 1000

/**
 * Lists through the seam (names and link targets only, never following a link) rather than
 * running `find` in the sandbox: no process to start, so it is fast and works the same whether
 * or not a command is running.
 */
export const listFiles = defineTool({
  name: 'list_files',
  kind: 'reads',
  description:
    'List the files under a folder of the workspace (/workspace by default), recursively and sorted, skipping .git and node_modules. ' +
    '`pattern` filters with a glob relative to that folder: `*.ts` matches by name at any depth, `src/**/*.test.ts` by path; `{a,b}` alternatives work.',
  fields: {
    path: { type: 'string', description: 'Folder to list, relative to /workspace or absolute under it. Default: the whole workspace.' },
    pattern: { type: 'string', description: 'Glob the listed paths must match, relative to `path` (`*`, `**`, `{a,b}`).' },
  },
  async run(args, ctx) {
    const p = workspacePath(args.path ?? '.', ctx.mount)
    if (!p.ok) return failed(`Refused: ${p.error}.`, 'refused')
    const rel = p.path
    const listed = await ctx.sandbox.list(rel)
    if (listed === null) return failed(`${shown(rel)} is not a folder of the workspace (it is missing, a file, or a symbolic link).`, `not a folder: ${shown(rel)}`)
    const match = args.pattern ? globMatcher(args.pattern) : () => true
    const found: { path: string; line: string }[] = []
    for (const e of listed) {
      if (e.type === 'other') continue
      if (!match(rel === '' ? e.path : e.path.slice(rel.length + 1))) continue
      found.push({ path: e.path, line: e.type === 'link' && e.target !== undefined ? `${e.path} -> ${e.target}` : e.path })
    }
    found.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))
    const what = `${args.pattern ? `matching ${args.pattern} ` : ''}under ${shown(rel)}`
    if (found.length === 0) return { output: `No files ${what}.`, isError: false, summary: '0 files', changes: [] }
    const lines = found.slice(0, MAX_ENTRIES).map((f) => f.line)
    if (found.length > MAX_ENTRIES) lines.push(`[showing the first ${MAX_ENTRIES.toLocaleString('en-US')} of ${plural(found.length, 'file')}; narrow the path or pattern]`)
    return { output: lines.join('\n'), isError: false, summary: plural(found.length, 'file'), changes: [] }
  },
})
