import type { ToolContext } from './builtin-tool.ts'

/** Files larger than this are not read whole into the service (read_file and edit_file refuse them). */
export const MAX_READ_BYTES = 16 * 1024 * 1024

/**
 * The size of a workspace file, looked up without reading it, so that a file of gigabytes is
 * never pulled into the service's memory. Only a guard: a path the seam refuses (a link on the
 * way) answers null here and is refused by the read that follows. Null when it is not a regular file.
 */
export async function fileSize(ctx: ToolContext, rel: string): Promise<number | null> {
  const st = await ctx.sandbox.stat(rel).catch(() => null)
  return st?.type === 'file' ? st.size : null
}
