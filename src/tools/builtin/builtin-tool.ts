import type { ChangeWindow, Sandbox } from '../../sandbox/sandbox.ts'
import { workspacePath } from './paths.ts'

/** A file a tool call created, modified or deleted in the workspace. */
export type FileChange = {
  /** Relative to the workspace, no leading `./`. */
  path: string
  kind: 'created' | 'modified' | 'deleted'
  /** Unified diff; text files only, capped (see diff.ts). */
  diff?: string
}

export type ToolContext = {
  /** The workspace, read and changed only through the seam (which refuses links). */
  sandbox: Sandbox
  /** Where the workspace is mounted in the sandbox: '/workspace'. */
  mount: string
  signal: AbortSignal
  /** Transient output of a running command (optional decoration). */
  onOutput?: (chunk: string) => void
  /** Text contents the turn has seen, by path, so that bash changes can carry diffs; tools update it. */
  seen: Map<string, string>
  /** A change window opened for this call already (null: none, the tool opens its own). */
  window?: ChangeWindow | null
}

export type ToolOutcome = {
  /** What the model receives. */
  output: string
  isError: boolean
  /** One short line for people, e.g. "exit 0 · 12 lines" or "wrote src/a.ts (120 bytes)". */
  summary: string
  changes: FileChange[]
  cancelled?: boolean
}

export type BuiltinTool = {
  name: string
  description: string
  /** JSON Schema object, additionalProperties false. */
  parameters: Record<string, unknown>
  kind: 'reads' | 'writes'
  run(args: Record<string, unknown>, ctx: ToolContext): Promise<ToolOutcome>
}

const PATH_TOOLS = new Set(['read_file', 'write_file', 'edit_file', 'list_files', 'grep'])

/**
 * For permission rules: the path a call touches (workspace-relative) and the command it runs.
 * The path is normalised the way the tool will resolve it, so `/workspace/src/../secret.txt`
 * meets a rule on `secret.txt`; a search or listing of the whole workspace is `.`, so that a
 * `**` rule still covers it. A path that leaves the workspace is returned as given (the tool
 * refuses it anyway, and a deny rule on it should still read naturally).
 */
export function ruleSubject(toolName: string, args: Record<string, unknown>): { path?: string; command?: string } {
  const a = args && typeof args === 'object' ? args : {}
  if (toolName === 'bash') return typeof a.command === 'string' ? { command: a.command } : {}
  if (!PATH_TOOLS.has(toolName)) return {}
  const raw = a.path
  if (raw === undefined || raw === null) return toolName === 'list_files' || toolName === 'grep' ? { path: '.' } : {}
  if (typeof raw !== 'string') return {}
  const rel = workspacePath(raw, '/workspace')
  if (!rel.ok) return { path: raw }
  return { path: rel.path === '' ? '.' : rel.path }
}
