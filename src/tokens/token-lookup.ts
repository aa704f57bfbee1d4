import type { Store } from '../db/database.ts'
import { markedCache } from '../db/marked-cache.ts'
import { findTokenByHash, type TokenRecord } from './tokens.store.ts'

/**
 * The token of a secret's hash, as the authentication of every request asks for it: on SQLite a
 * token read is reused until anything is written to the database (a revocation, an expiry moved,
 * scopes changed all count at once); elsewhere every call reads the store.
 */
export function tokenLookup(store: Store): (hash: string, mark?: string) => Promise<TokenRecord | null> {
  const cache = markedCache<TokenRecord>(store)
  return (hash, mark) => cache(hash, () => findTokenByHash(store.db, hash), mark)
}
