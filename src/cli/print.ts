// How the client commands answer: one JSON document with --json (for scripts), a few readable
// lines otherwise; refusals on stderr with the specification's code, message and request id.
import { WarrenError } from '../../sdk/src/index.ts'
import { NotConnected } from './connection.ts'

/** Exit codes the client commands end with (the README lists them). */
export const EXIT = {
  ok: 0,
  /** A request was refused or could not be sent. */
  refused: 1,
  /** The turn ended failed. */
  turnFailed: 2,
  /** The turn was cancelled. */
  turnCancelled: 3,
} as const

export function out(line: string): void {
  process.stdout.write(line.endsWith('\n') ? line : `${line}\n`)
}
export function note(line: string): void {
  process.stderr.write(line.endsWith('\n') ? line : `${line}\n`)
}

export function printJson(value: unknown): void {
  out(JSON.stringify(value, null, 2))
}

const pad = (s: string, n: number) => (s.length >= n ? s : s + ' '.repeat(n - s.length))

/** Rows as aligned columns under a header (every value already a string). */
export function printTable(header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)))
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : pad(c, widths[i]!))).join('  ').trimEnd()
  out(line(header))
  for (const r of rows) out(line(r))
}

export const when = (ms: number | null | undefined) => (ms ? new Date(ms).toISOString().replace('T', ' ').slice(0, 19) : '-')

/** Prints what went wrong and sets the exit code: what every client command does with a failure. */
export function report(err: unknown): void {
  if (err instanceof WarrenError) {
    note(`warren: ${err.code}: ${err.message}${err.requestId ? ` (request ${err.requestId})` : ''}${err.retryAfter !== null ? ` (retry after ${err.retryAfter} s)` : ''}`)
  } else if (err instanceof NotConnected) {
    note(`warren: ${err.message}`)
  } else {
    const cause = (err as { cause?: { code?: string; message?: string } })?.cause
    const msg = err instanceof Error ? err.message : String(err)
    note(`warren: ${msg}${cause?.code ? ` (${cause.code})` : cause?.message ? ` (${cause.message})` : ''}`)
  }
  process.exitCode = EXIT.refused
}
