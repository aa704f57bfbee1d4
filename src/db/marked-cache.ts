import type { Store } from './database.ts'

/** Values kept at once; past this many the whole set is read again as needed. */
const MAX_KEPT = 10_000

export type MarkedCache<V> = {
  /** The value under key: from memory when kept under this mark, else from `read`. */
  (key: string, read: () => Promise<V | null>, mark?: string): Promise<V | null>
  /**
   * The value kept under key for this mark, answered at once without a promise; undefined when
   * nothing is kept (a miss, a moved mark, or a store without marks): then call the cache itself.
   */
  kept(key: string, mark: string | undefined): V | undefined
}

/**
 * Reads kept between requests where the store has a write mark (SQLite): a value read is reused
 * until anything is written to the database, by this process or another, so a quiet store
 * answers from memory and any write counts at once. Elsewhere every call reads the store.
 * Misses (null) are never kept: an unknown key costs a read each time, not memory.
 * `mark`, when given, is one this request already read (readMark): the answer then reflects the
 * store at that instant, still within the request, and a hit costs no second read of the mark.
 */
export function markedCache<V>(store: Pick<Store, 'writeMark'>): MarkedCache<V> {
  const writeMark = store.writeMark
  if (!writeMark) return Object.assign((_key: string, read: () => Promise<V | null>) => read(), { kept: () => undefined })
  const kept = new Map<string, V>()
  let keptAt = ''
  const keptUnder = (key: string, mark: string): V | undefined => {
    if (mark !== keptAt) {
      kept.clear()
      keptAt = mark
    }
    return kept.get(key)
  }
  const cache = async (key: string, read: () => Promise<V | null>, mark = writeMark()): Promise<V | null> => {
    const hit = keptUnder(key, mark)
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
  return Object.assign(cache, { kept: (key: string, mark: string | undefined) => keptUnder(key, mark ?? writeMark()) })
}
