import type { Store } from '../db/database.ts'
import { findTokenByHash, type TokenRecord } from './tokens.store.ts'

/** Tokens kept between requests; past this many the whole set is read again as needed. */
const MAX_KEPT = 10_000

/**
 * The token of a secret's hash, as the authentication of every request asks for it. Where the
 * store has a write mark (SQLite), a token read is reused until anything is written to the
 * database, by this process or another: a revocation, an expiry moved, scopes changed, all count
 * at once, and a quiet store answers from memory. Elsewhere every call reads the store.
 * Misses are never kept: an unknown secret costs a read each time, not memory.
 */
export function tokenLookup(store: Store): (hash: string) => Promise<TokenRecord | null> {
  const writeMark = store.writeMark
  if (!writeMark) return (hash) => findTokenByHash(store.db, hash)
  const kept = new Map<string, TokenRecord>()
  let keptAt = ''
  return async (hash) => {
    const mark = writeMark()
    if (mark !== keptAt) {
      kept.clear()
      keptAt = mark
    }
    const hit = kept.get(hash)
    if (hit) return hit
    const token = await findTokenByHash(store.db, hash)
    // A write landing between the mark and the read could be on either side of it: keep the
    // token only when the mark has not moved meanwhile.
    if (token && writeMark() === keptAt) {
      if (kept.size >= MAX_KEPT) kept.clear()
      kept.set(hash, token)
    }
    return token
  }
}
