/**
 * Glob matching for permission rules, domain lists and file patterns: `**` matches anything
 * (separators included), `*` matches within one segment, every other character is literal.
 *
 * Patterns come from models and callers, so matching must never backtrack: a regular expression
 * built from `*a*a*a…b` takes exponential time on a near-miss and would stall the event loop.
 * This runs the pattern as a set of positions, one pass over the text: O(pattern × text).
 */
export function globMatch(pattern: string, text: string, separator = '/', ignoreCase = false): boolean {
  return compileGlob(pattern, separator, ignoreCase)(text)
}

const STAR = -1
const GLOBSTAR = -2
type Matcher = (text: string) => boolean
const cache = new Map<string, Matcher>()

export function compileGlob(pattern: string, separator = '/', ignoreCase = false): Matcher {
  const key = `${separator}${ignoreCase ? 'i' : ''}\u0000${pattern}`
  let m = cache.get(key)
  if (m) return m
  const source = ignoreCase ? pattern.toLowerCase() : pattern
  // Tokens: a character code, STAR or GLOBSTAR (runs of stars collapse).
  const tokens: number[] = []
  for (let i = 0; i < source.length; i++) {
    if (source[i] !== '*') {
      tokens.push(source.charCodeAt(i))
      continue
    }
    let run = 1
    while (source[i + 1] === '*') (i++, run++)
    const t = run >= 2 ? GLOBSTAR : STAR
    const prev = tokens.at(-1)
    if (prev === GLOBSTAR) continue
    if (prev === STAR) tokens[tokens.length - 1] = t
    else tokens.push(t)
  }
  const sep = separator.charCodeAt(0)
  const n = tokens.length
  m = (input: string) => {
    const text = ignoreCase ? input.toLowerCase() : input
    let active = new Uint8Array(n + 1)
    let next = new Uint8Array(n + 1)
    // A star may match nothing: reaching it also reaches what follows it.
    const close = (set: Uint8Array) => {
      for (let p = 0; p < n; p++) if (set[p] && tokens[p]! < 0) set[p + 1] = 1
    }
    active[0] = 1
    close(active)
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i)
      next.fill(0)
      let any = false
      for (let p = 0; p < n; p++) {
        if (!active[p]) continue
        const t = tokens[p]!
        if (t === GLOBSTAR || (t === STAR && c !== sep)) (next[p] = 1), (any = true)
        else if (t === c) (next[p + 1] = 1), (any = true)
      }
      if (!any) return false
      close(next)
      ;[active, next] = [next, active]
    }
    return active[n] === 1
  }
  if (cache.size > 1000) cache.clear()
  cache.set(key, m)
  return m
}
