import path from 'node:path'
import { globToRegExp } from '../../shared/glob.ts'

/**
 * `{a,b}` alternatives, expanded into separate patterns (one level, no nesting): models write
 * `*.{ts,tsx}` all the time and neither src/shared/glob.ts nor grep's --include knows braces.
 */
export function expandBraces(pattern: string): string[] {
  const m = /\{([^{}]*,[^{}]*)\}/.exec(pattern)
  if (!m) return [pattern]
  const head = pattern.slice(0, m.index)
  const tail = pattern.slice(m.index + m[0].length)
  return m[1]!.split(',').flatMap((alt) => expandBraces(`${head}${alt}${tail}`))
}

/**
 * A file matcher for a glob relative to a folder, with the meaning people expect: a pattern
 * without `/` matches the file name at any depth (`*.ts`), `**\/x` also matches at the top, and
 * otherwise the path relative to the folder must match (`*` within a segment, `**` across).
 */
export function globMatcher(pattern: string): (relPath: string) => boolean {
  const tests = expandBraces(pattern.replace(/^(\.\/)+/, '')).map((p) => {
    const full = globToRegExp(p)
    const top = p.startsWith('**/') ? globToRegExp(p.slice(3)) : null
    const byName = !p.includes('/')
    return (rel: string) => full.test(rel) || (top?.test(rel) ?? false) || (byName && full.test(path.posix.basename(rel)))
  })
  return (rel) => tests.some((t) => t(rel))
}
