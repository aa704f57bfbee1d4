/**
 * Glob matching for permission rules and domain lists: `**` matches anything (separators
 * included), `*` matches within one segment, every other character is literal.
 */
export function globMatch(pattern: string, text: string, separator = '/', ignoreCase = false): boolean {
  return globToRegExp(pattern, separator, ignoreCase).test(text)
}

const cache = new Map<string, RegExp>()

export function globToRegExp(pattern: string, separator = '/', ignoreCase = false): RegExp {
  const key = `${separator}${ignoreCase ? 'i' : ''}\u0000${pattern}`
  let re = cache.get(key)
  if (!re) {
    const sep = separator.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')
    const body = pattern
      .split('**')
      .map((part) =>
        part
          .split('*')
          .map((lit) => lit.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
          .join(`[^${sep}]*`),
      )
      .join('.*')
    re = new RegExp(`^${body}$`, ignoreCase ? 'i' : '')
    if (cache.size > 1000) cache.clear()
    cache.set(key, re)
  }
  return re
}
