import fs from 'node:fs/promises'
import path from 'node:path'
import type { ToolContext } from './builtin-tool.ts'

/** Files larger than this are not read whole into the service (read_file and edit_file refuse them). */
export const MAX_READ_BYTES = 16 * 1024 * 1024

/**
 * The size of a workspace file, looked up on the host without reading it, so that a file of
 * gigabytes is never pulled into the service's memory. Only a guard: the content itself is
 * always read through the sandbox, which refuses links. Null when it is not a regular file.
 */
export async function sizeOnHost(ctx: ToolContext, rel: string): Promise<number | null> {
  const st = await fs.lstat(path.join(ctx.workspaceDir, rel)).catch(() => null)
  return st?.isFile() ? st.size : null
}
