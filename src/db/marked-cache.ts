import type { Store } from './database.ts'

/** Values kept at once; past this many the whole set is read again as needed. */
const MAX_KEPT = 10_000

/**
 * Reads kept between requests where the store has a write mark (SQLite): a value read is reused
 * until anything is written to the database, by this process or another, so a quiet store
 * answers from memory and any write counts at once. Elsewhere every call reads the store.
 * Misses (null) are never kept: an unknown key costs a read each time, not memory.
 * `mark`, when given, is one this request already read (readMark): the answer then reflects the
 * store at that instant, still within the request, and a hit costs no second read of the mark.
 */
export function markedCache<V>(store: Pick<Store, 'writeMark'>): (key: string, read: () => Promise<V | null>, mark?: string) => Promise<V | null> {
  const writeMark = store.writeMark
  if (!writeMark) return (_key, read) => read()
  const kept = new Map<string, V>()
  let keptAt = ''
  return async (key, read, mark = writeMark()) => {
    if (mark !== keptAt) {
      kept.clear()
      keptAt = mark
    }
    const hit = kept.get(key)
    if (hit !== undefined) return hit
    const value = await read()
    // A write landing between the mark and the read could be on either side of it: keep the value
    // only when the mark this read began under is still the mark, and still the set's.
    if (value !== null && keptAt === mark && writeMark() === mark) {
      if (kept.size >= MAX_KEPT) kept.clear()
      kept.set(key, value)
    }
    return value
  }
}
