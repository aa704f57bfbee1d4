import { failed } from './args.ts'
import { fileSize } from './file-size.ts'
import { fileChange } from './changes.ts'
import { defineTool } from './define.ts'
import { workspacePath } from './paths.ts'
import { diffable, MAX_DIFF_SOURCE, plural } from './text.ts'

export const writeFile = defineTool({
  name: 'write_file',
  kind: 'writes',
  description:
    'Create or overwrite a file in the workspace (/workspace) with the given content; missing folders are created. ' +
    'Prefer edit_file for changing part of an existing file.',
  fields: {
    path: { type: 'string', required: true, description: 'The file, relative to /workspace or absolute under it.' },
    content: { type: 'string', required: true, anyText: true, description: 'The whole new content of the file.' },
  },
  async run(args, ctx) {
    const p = workspacePath(args.path, ctx.mount)
    if (!p.ok) return failed(`Refused: ${p.error}.`, 'refused')
    if (p.path === '') return failed(`${args.path} is the workspace folder, not a file.`, 'not a file')
    const rel = p.path
    // Read first: the old text gives the diff, and a refused path (a link) is refused before any write.
    // A huge file is replaced without reading it back: there would be no diff of it anyway.
    const oldSize = await fileSize(ctx, rel)
    const huge = oldSize !== null && oldSize > MAX_DIFF_SOURCE
    const old = huge ? null : await ctx.sandbox.readFile(rel)
    const existed = huge || old !== null
    const next = Buffer.from(args.content, 'utf8')
    await ctx.sandbox.writeFile(rel, next)
    const size = plural(next.length, 'byte')
    if (old && old.equals(next)) {
      return { output: `${rel} already had this content (${size}); nothing changed.`, isError: false, summary: `wrote ${rel} (unchanged)`, changes: [] }
    }
    const oldText = old && diffable(old) ? old.toString('utf8') : null
    const change = fileChange(ctx, rel, oldText, !existed, next)
    const verb = existed ? 'wrote' : 'created'
    return { output: `${existed ? 'Wrote' : 'Created'} ${rel} (${size}).`, isError: false, summary: `${verb} ${rel} (${size})`, changes: [change] }
  },
})
