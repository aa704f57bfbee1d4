import path from 'node:path'
import { quote } from '../../shared/sh-quote.ts'
import { StringDecoder } from 'node:string_decoder'
import { failed } from './args.ts'
import { defineTool } from './define.ts'
import { expandBraces, globMatcher } from './glob-match.ts'
import { workspacePath } from './paths.ts'
import { plural } from './text.ts'

const MAX_MATCHES = 500
const MAX_CHARS = 30_000
const MAX_LINE = 500
const TIMEOUT_MS = 60_000

/**
 * GNU grep inside the sandbox (ripgrep is not there): it reads files as the sandbox's uid, never
 * as the service. `-Z` ends each file name with NUL, so a name holding `:` still parses and a
 * glob with folders in it (which --include cannot express) can be applied to the names here.
 */
export const grep = defineTool({
  name: 'grep',
  kind: 'reads',
  description:
    'Search file contents in the workspace (/workspace) for a regular expression (POSIX extended, as `grep -E`: use [0-9] rather than \\d); prints `path:line:text` per matching line. ' +
    'Skips binary files, .git and node_modules; `glob` limits the files searched (`*.ts`, `src/**/*.{ts,tsx}`).',
  fields: {
    pattern: { type: 'string', required: true, description: 'Extended regular expression to look for.' },
    path: { type: 'string', description: 'File or folder to search, relative to /workspace or absolute under it. Default: the whole workspace.' },
    glob: { type: 'string', description: 'Only files matching this glob, relative to `path` (`*`, `**`, `{a,b}`).' },
  },
  async run(args, ctx) {
    const p = workspacePath(args.path ?? '.', ctx.mount)
    if (!p.ok) return failed(`Refused: ${p.error}.`, 'refused')
    const rel = p.path
    const globs = args.glob ? expandBraces(args.glob) : []
    // --include sees base names only; the full glob is checked below on the names grep prints.
    const includes = globs.map((g) => `--include=${quote(g.slice(g.lastIndexOf('/') + 1))}`)
    const match = args.glob ? globMatcher(args.glob) : null
    const command = [
      'grep -rnHIZE --color=never --exclude-dir=.git --exclude-dir=node_modules',
      ...includes,
      `-e ${quote(args.pattern)}`,
      // No operand searches the working folder and prints names without a `./` prefix.
      ...(rel === '' ? [] : ['--', quote(rel)]),
    ].join(' ')
    const lines: string[] = []
    let chars = 0
    let more = false
    const stop = new AbortController()
    const decoder = new StringDecoder('utf8')
    let partial = ''
    const onLine = (raw: string) => {
      const nul = raw.indexOf('\0')
      if (nul < 0) return
      const file = raw.slice(0, nul)
      if (match) {
        const under = rel === '' ? file : file === rel ? path.posix.basename(file) : file.slice(rel.length + 1)
        if (!match(under)) return
      }
      if (lines.length >= MAX_MATCHES || chars >= MAX_CHARS) {
        more = true
        stop.abort()
        return
      }
      let text = raw.slice(nul + 1)
      if (text.length > MAX_LINE) text = `${text.slice(0, MAX_LINE)}… [line cut]`
      const line = `${file}:${text}`
      lines.push(line)
      chars += line.length + 1
    }
    const onChunk = (s: string) => {
      const parts = (partial + s).split('\n')
      partial = parts.pop()!
      for (const l of parts) onLine(l)
    }
    const r = await ctx.sandbox.exec(
      { command, cwd: ctx.mount, timeoutMs: TIMEOUT_MS, onStdout: (c) => onChunk(decoder.write(c)) },
      AbortSignal.any([ctx.signal, stop.signal]),
    )
    onChunk(decoder.end())
    if (partial) onLine(partial)
    if (ctx.signal.aborted) return { output: 'Cancelled.', isError: true, summary: 'cancelled', changes: [], cancelled: true }
    const stderr = r.stderr.toString('utf8').trim().split('\n').slice(0, 5).join('\n')
    const notes: string[] = []
    if (more) notes.push(`[stopped after ${plural(lines.length, 'match', 'matches')}; narrow the pattern, path or glob to see the rest]`)
    if (r.timedOut) notes.push(`[grep timed out after ${TIMEOUT_MS / 1000} s; these are the matches found until then]`)
    if (stderr && !more) notes.push(`[grep: ${stderr}]`)
    if (lines.length === 0) {
      // Exit 1 is grep's "no match"; 2 (a bad expression, a missing path) is the model's to fix.
      const error = r.timedOut || (r.exitCode !== 0 && r.exitCode !== 1)
      if (!error) return { output: 'No matches.', isError: false, summary: '0 matches', changes: [] }
      return failed(notes.join('\n') || `grep failed (exit ${r.exitCode})`, 'grep failed')
    }
    const output = [...lines, ...notes].join('\n')
    return { output, isError: false, summary: `${more ? 'over ' : ''}${plural(lines.length, 'match', 'matches')}`, changes: [] }
  },
})
