import type { FileChange, ToolContext } from './builtin-tool.ts'
import { fileSize } from './file-size.ts'
import { unifiedDiff } from './diff.ts'
import { diffable, MAX_DIFF_SOURCE } from './text.ts'
import type { WorkspaceChange } from '../../sandbox/sandbox.ts'

/** Most files of one bash call read back for a diff: a build writing thousands gets kinds only. */
const MAX_DIFFED = 50

/**
 * The change a file tool made, with a diff when both sides are text (oldText null: created), and
 * `seen` brought up to date so a later bash change to the file diffs against what it is now.
 */
export function fileChange(ctx: ToolContext, path: string, oldText: string | null, created: boolean, next: Buffer): FileChange {
  const change: FileChange = { path, kind: created ? 'created' : 'modified' }
  if (diffable(next)) {
    const text = next.toString('utf8')
    ctx.seen.set(path, text)
    if (created || oldText !== null) {
      const diff = unifiedDiff(path, created ? null : oldText, text)
      if (diff) change.diff = diff
    }
  } else {
    ctx.seen.delete(path)
  }
  return change
}

/**
 * Turns what changed around a bash call into FileChanges. Created files and modified
 * files whose earlier text the turn has seen are read back (through the sandbox, which refuses
 * links) for a diff; a modified file the turn never read gets its kind only, since there is
 * nothing to diff it against.
 */
export async function bashChanges(ctx: ToolContext, found: WorkspaceChange[]): Promise<FileChange[]> {
  const out: FileChange[] = []
  let diffed = 0
  for (const { path, kind } of found) {
    if (kind === 'deleted') {
      ctx.seen.delete(path)
      out.push({ path, kind })
      continue
    }
    const old = ctx.seen.get(path)
    if ((kind === 'modified' && old === undefined) || diffed >= MAX_DIFFED) {
      // Whatever the turn saw of it is stale now.
      ctx.seen.delete(path)
      out.push({ path, kind })
      continue
    }
    const size = await fileSize(ctx, path)
    if (size === null || size > MAX_DIFF_SOURCE) {
      // Too large to diff: never read a file of gigabytes into the service for nothing.
      ctx.seen.delete(path)
      out.push({ path, kind })
      continue
    }
    diffed++
    const next = await ctx.sandbox.readFile(path).catch(() => null)
    if (!next) {
      // Gone again (or turned into a link) since the snapshot: report what the snapshot saw.
      ctx.seen.delete(path)
      out.push({ path, kind })
      continue
    }
    out.push(fileChange(ctx, path, old ?? null, kind === 'created', next))
  }
  return out
}
