import path from 'node:path'
import { compileGlob } from '../../shared/glob.ts'

/** More alternatives than this is not a file pattern but an attempt to exhaust the service. */
const MAX_ALTERNATIVES = 64

/**
 * `{a,b}` alternatives, expanded into separate patterns (one level, no nesting): models write
 * `*.{ts,tsx}` all the time and neither src/shared/glob.ts nor grep's --include knows braces.
 */
export function expandBraces(pattern: string): string[] {
  const m = /\{([^{}]*,[^{}]*)\}/.exec(pattern)
  if (!m) return [pattern]
  const head = pattern.slice(0, m.index)
  const tail = pattern.slice(m.index + m[0].length)
  const out: string[] = []
  for (const alt of m[1]!.split(',')) {
    for (const p of expandBraces(`${head}${alt}${tail}`)) {
      if (out.length >= MAX_ALTERNATIVES) return out
      out.push(p)
    }
  }
  return out
}

/**
 * A file matcher for a glob relative to a folder, with the meaning people expect: a pattern
 * without `/` matches the file name at any depth (`*.ts`), `**\/x` also matches at the top, and
 * otherwise the path relative to the folder must match (`*` within a segment, `**` across).
 */
export function globMatcher(pattern: string): (relPath: string) => boolean {
  const tests = expandBraces(pattern.replace(/^(\.\/)+/, '')).map((p) => {
    const full = compileGlob(p)
    const top = p.startsWith('**/') ? compileGlob(p.slice(3)) : null
    const byName = !p.includes('/')
    return (rel: string) => full(rel) || (top?.(rel) ?? false) || (byName && full(path.posix.basename(rel)))
  })
  return (rel) => tests.some((t) => t(rel))
}
