import type { Store } from '../db/database.ts'
import { markedCache } from '../db/marked-cache.ts'
import { findTokenByHash, type TokenRecord } from './tokens.store.ts'

export type TokenLookup = {
  /** The token of a secret's hash, read from the store unless kept under this mark. */
  find(hash: string, mark?: string): Promise<TokenRecord | null>
  /** The token kept under this mark, answered at once; undefined when it must be read (find). */
  kept(hash: string, mark: string | undefined): TokenRecord | undefined
}

/**
 * The token of a secret's hash, as the authentication of every request asks for it: on SQLite a
 * token read is reused until anything is written to the database (a revocation, an expiry moved,
 * scopes changed all count at once); elsewhere every call reads the store.
 */
export function tokenLookup(store: Store): TokenLookup {
  const cache = markedCache<TokenRecord>(store)
  return {
    find: (hash, mark) => cache(hash, () => findTokenByHash(store.db, hash), mark),
    kept: (hash, mark) => cache.kept(hash, mark),
  }
}
