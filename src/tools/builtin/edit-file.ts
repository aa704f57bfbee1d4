import { failed } from './args.ts'
import { MAX_READ_BYTES, fileSize } from './file-size.ts'
import { fileChange } from './changes.ts'
import { defineTool } from './define.ts'
import { workspacePath } from './paths.ts'
import { looksBinary, plural } from './text.ts'

/** Where `needle` occurs in `hay`, without overlaps (the replacement is applied to exactly these). */
function occurrences(hay: string, needle: string): number[] {
  const at: number[] = []
  for (let i = hay.indexOf(needle); i >= 0; i = hay.indexOf(needle, i + needle.length)) at.push(i)
  return at
}

export const editFile = defineTool({
  name: 'edit_file',
  kind: 'writes',
  description:
    'Replace an exact string in a file of the workspace (/workspace). `old_string` must match exactly once (include surrounding lines to make it unique) unless `replace_all` is true.',
  fields: {
    path: { type: 'string', required: true, description: 'The file, relative to /workspace or absolute under it.' },
    old_string: { type: 'string', required: true, anyText: true, description: 'The exact text to replace, whitespace included.' },
    new_string: { type: 'string', required: true, anyText: true, description: 'The text to put in its place.' },
    replace_all: { type: 'boolean', description: 'Replace every occurrence instead of exactly one. Default false.' },
  },
  async run(args, ctx) {
    const p = workspacePath(args.path, ctx.mount)
    if (!p.ok) return failed(`Refused: ${p.error}.`, 'refused')
    if (p.path === '') return failed(`${args.path} is the workspace folder, not a file.`, 'not a file')
    const rel = p.path
    if (args.old_string === '') return failed('old_string is empty; to create a file or replace all of it, use write_file.', 'empty old_string')
    if (args.old_string === args.new_string) return failed('old_string and new_string are the same; there is nothing to change.', 'no change')
    const bytes = await fileSize(ctx, rel)
    if (bytes !== null && bytes > MAX_READ_BYTES) return failed(`${rel} is ${bytes} bytes, too large to edit at once; use bash (head, tail, sed -n) to work on parts of it.`, `too large: ${rel}`)
    const buf = await ctx.sandbox.readFile(rel)
    if (!buf) return failed(`File not found: ${rel}`, `not found: ${rel}`)
    if (looksBinary(buf)) return failed(`${rel} is a binary file; edit_file only edits text.`, `binary file ${rel}`)
    const text = buf.toString('utf8')
    const at = occurrences(text, args.old_string)
    if (at.length === 0) return failed(`old_string was not found in ${rel}; it must match the file exactly, whitespace included. Read the file again if unsure.`, 'no match')
    if (at.length > 1 && !args.replace_all) {
      return failed(`old_string occurs ${at.length} times in ${rel}; include more surrounding text to make it unique, or set replace_all to true.`, `${at.length} matches`)
    }
    // Slices, not String.replace: `$&` and friends in new_string must stay literal.
    const parts: string[] = []
    let from = 0
    for (const i of at) {
      parts.push(text.slice(from, i), args.new_string)
      from = i + args.old_string.length
    }
    parts.push(text.slice(from))
    const next = Buffer.from(parts.join(''), 'utf8')
    await ctx.sandbox.writeFile(rel, next)
    const change = fileChange(ctx, rel, text, false, next)
    const n = plural(at.length, 'replacement')
    return { output: `Edited ${rel}: ${n}.`, isError: false, summary: `edited ${rel} (${n})`, changes: [change] }
  },
})
