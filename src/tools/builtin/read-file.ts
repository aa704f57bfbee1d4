import { failed } from './args.ts'
import { defineTool } from './define.ts'
import { workspacePath } from './paths.ts'
import { looksBinary, MAX_DIFF_SOURCE, plural } from './text.ts'
import { MAX_READ_BYTES, fileSize } from './file-size.ts'

const DEFAULT_LIMIT = 2000
const MAX_LINE = 2000
/** However many lines were asked for, the model gets at most this much text per call. */
const MAX_OUTPUT = 100_000

export const readFile = defineTool({
  name: 'read_file',
  kind: 'reads',
  description:
    'Read a text file of the workspace (/workspace), shown with 1-based line numbers like `cat -n`. ' +
    `Reads up to ${DEFAULT_LIMIT} lines from \`offset\`; use offset and limit to page through a longer file.`,
  fields: {
    path: { type: 'string', required: true, description: 'The file, relative to /workspace or absolute under it.' },
    offset: { type: 'integer', minimum: 1, description: 'First line to show, 1-based. Default 1.' },
    limit: { type: 'integer', minimum: 1, description: `How many lines to show. Default ${DEFAULT_LIMIT}.` },
  },
  async run(args, ctx) {
    const p = workspacePath(args.path, ctx.mount)
    if (!p.ok) return failed(`Refused: ${p.error}.`, 'refused')
    if (p.path === '') return failed(`${args.path} is the workspace folder, not a file; use list_files to see what it holds.`, 'not a file')
    const rel = p.path
    const bytes = await fileSize(ctx, rel)
    if (bytes !== null && bytes > MAX_READ_BYTES) return failed(`${rel} is ${bytes} bytes, too large to read at once; use bash (head, tail, sed -n) to work on parts of it.`, `too large: ${rel}`)
    const buf = await ctx.sandbox.readFile(rel)
    if (!buf) return failed(`File not found: ${rel}`, `not found: ${rel}`)
    if (looksBinary(buf)) {
      return { output: `${rel} is a binary file (${plural(buf.length, 'byte')}); its content is not shown.`, isError: false, summary: `binary file ${rel}`, changes: [] }
    }
    const text = buf.toString('utf8')
    // Only what could later be diffed is worth holding on to (see changes.ts).
    if (buf.length <= MAX_DIFF_SOURCE) ctx.seen.set(rel, text)
    else ctx.seen.delete(rel)
    const lines = text.split('\n')
    if (text.endsWith('\n') || text === '') lines.pop()
    const total = lines.length
    if (total === 0) return { output: `${rel} is empty.`, isError: false, summary: `read ${rel} (empty)`, changes: [] }
    const start = (args.offset ?? 1) - 1
    if (start >= total) {
      return { output: `${rel} has ${plural(total, 'line')}; offset ${start + 1} is past its end.`, isError: false, summary: `read ${rel} (past the end)`, changes: [] }
    }
    const want = Math.min(total, start + (args.limit ?? DEFAULT_LIMIT))
    const out: string[] = []
    let size = 0
    let end = start
    while (end < want) {
      let line = lines[end]!
      if (line.length > MAX_LINE) line = `${line.slice(0, MAX_LINE)}… [line cut: ${plural(line.length, 'character')} in all]`
      const row = `${String(end + 1).padStart(6)}\t${line}`
      if (size + row.length > MAX_OUTPUT && out.length > 0) break
      out.push(row)
      size += row.length + 1
      end++
    }
    if (end < total) out.push(`[lines ${start + 1}-${end} of ${total}; read on with offset=${end + 1}]`)
    return { output: out.join('\n'), isError: false, summary: `read ${rel} (lines ${start + 1}-${end} of ${total})`, changes: [] }
  },
})
