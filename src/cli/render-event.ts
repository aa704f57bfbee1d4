// A session's events as a person reads them in a terminal: the agent's text as it streams, its
// tool calls and their results, todos, file changes, errors. One renderer keeps whether the cursor
// sits mid-line, so streamed text and the lines between never run together.
import type { WarrenEvent } from '../../sdk/src/index.ts'

const MAX_ARGS = 160

/** Tool arguments on one line: the command of a bash call, compact JSON otherwise. */
export function argsLine(args: unknown): string {
  const a = args as Record<string, unknown> | null
  const text = typeof a?.command === 'string' ? a.command : typeof a?.path === 'string' && Object.keys(a).length === 1 ? a.path : JSON.stringify(args ?? {})
  const one = text.replace(/\s*\n\s*/g, ' ⏎ ')
  return one.length > MAX_ARGS ? `${one.slice(0, MAX_ARGS - 1)}…` : one
}

export type Renderer = { event(e: WarrenEvent): void; line(text: string): void; end(): void }

export function renderer(write: (s: string) => void): Renderer {
  let midLine = false
  let streamed = false
  const line = (text: string) => {
    if (midLine) write('\n')
    midLine = false
    write(`${text}\n`)
  }
  return {
    line,
    end: () => {
      if (midLine) write('\n')
      midLine = false
    },
    event(e) {
      switch (e.type) {
        case 'agent.text':
          write(e.payload.delta)
          streamed = true
          midLine = !e.payload.delta.endsWith('\n')
          return
        case 'agent.message':
          // Already on screen when it streamed; a client that joined late gets it whole.
          if (!streamed) line(e.payload.text)
          else if (midLine) line('')
          streamed = false
          return
        case 'user.message':
          return line(`> ${e.payload.text}`)
        case 'agent.tool_call':
          return line(`→ ${e.payload.toolName} ${argsLine(e.payload.args)}`)
        case 'agent.tool_result':
          return line(`  ${e.payload.cancelled ? '⊘' : e.payload.isError ? '✗' : '✓'} ${e.payload.summary}`)
        case 'file.changed':
          return line(`  ${e.payload.kind === 'created' ? '+' : e.payload.kind === 'deleted' ? '-' : '~'} ${e.payload.path}`)
        case 'agent.todos':
          return line(e.payload.items.map((t) => `  [${t.status === 'completed' ? 'x' : t.status === 'in_progress' ? '~' : ' '}] ${t.label}`).join('\n'))
        case 'agent.error':
          return line(`! ${e.payload.message}`)
        case 'agent.compaction':
          return line(`  (context compacted: ${e.payload.before} → ${e.payload.after} tokens)`)
        case 'message.queued':
          return line(`  (queued${e.payload.position !== undefined ? ` at ${e.payload.position}` : ''}: ${e.payload.text})`)
        case 'mcp.unavailable':
          return line(`! tool server ${e.payload.server} skipped: ${e.payload.reason}`)
        case 'preview.ready':
          return line(`  preview: ${e.payload.url}`)
        case 'artifact.created':
          return line(`  artifact ${e.payload.path} (${e.payload.size_bytes} bytes)`)
        case 'approval.resolved':
          return line(`  ${e.payload.approved ? 'approved' : `refused${e.payload.code ? ` (${e.payload.code})` : ''}`}`)
        case 'workspace.recovery_failed':
          return line(`! workspace: ${e.payload.message}`)
        default:
          return
      }
    },
  }
}
