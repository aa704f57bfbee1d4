import { sql } from 'kysely'
import { least, type Store } from '../db/database.ts'

export type Bucket = 'sessions' | 'general'
export type RateDecision = {
  allowed: boolean
  limit: number
  remaining: number
  /** Whole seconds until the bucket is full again. */
  resetSeconds: number
  /** Whole seconds until one request is allowed; 0 when allowed. */
  retryAfterSeconds: number
}

/**
 * A token bucket per (token, bucket) kept in the store, so that several service processes share
 * one allowance. It refills continuously at `perMinute` a minute; a refused request takes nothing.
 */
export async function takeToken(store: Store, tokenId: string, bucket: Bucket, perMinute: number): Promise<RateDecision> {
  return takeTokenAtOnce(store, tokenId, bucket, perMinute) ?? takeFromStore(store, tokenId, bucket, perMinute)
}

/**
 * The decision without waiting where the buckets live in this process's memory (SQLite), so that
 * a request answered from memory needs no promise; undefined where they live in the store.
 */
export function takeTokenAtOnce(store: Store, tokenId: string, bucket: Bucket, perMinute: number): RateDecision | undefined {
  return store.dialect === 'sqlite' ? takeFromMemory(store, `${tokenId}:${bucket}`, perMinute) : undefined
}

async function takeFromStore(store: Store, tokenId: string, bucket: Bucket, perMinute: number): Promise<RateDecision> {
  const { db, dialect } = store
  const perMs = perMinute / 60_000
  for (let attempt = 0; attempt < 3; attempt++) {
    const now = Date.now()
    // Casts keep PostgreSQL from inferring the rate's parameter type as bigint from its neighbour.
    const refilled = least(
      dialect,
      sql`CAST(${perMinute} AS double precision)`,
      sql`tokens + (CAST(${now} AS bigint) - updated_at) * CAST(${perMs} AS double precision)`,
    )
    // One conditional statement: atomic on both dialects without an explicit lock.
    const result = await sql<{ tokens: number }>`UPDATE rate_buckets SET tokens = ${refilled} - 1, updated_at = CAST(${now} AS bigint)
      WHERE token_id = ${tokenId} AND bucket = ${bucket} AND ${refilled} >= 1 RETURNING tokens`.execute(db)
    const row = result.rows[0]
    if (row) return decide(true, Number(row.tokens), perMinute)
    const existing = await db
      .selectFrom('rate_buckets')
      .select(['tokens', 'updated_at'])
      .where('token_id', '=', tokenId)
      .where('bucket', '=', bucket)
      .executeTakeFirst()
    if (existing) {
      const level = Math.min(perMinute, Number(existing.tokens) + (now - Number(existing.updated_at)) * perMs)
      if (level >= 1) continue // refilled between the two statements: try again
      return decide(false, level, perMinute)
    }
    const inserted = await db
      .insertInto('rate_buckets')
      .values({ token_id: tokenId, bucket, tokens: perMinute - 1, updated_at: now })
      .onConflict((oc) => oc.columns(['token_id', 'bucket']).doNothing())
      .returning('tokens')
      .executeTakeFirst()
    if (inserted) return decide(true, perMinute - 1, perMinute)
  }
  throw new Error('rate limit bucket could not be updated')
}

function decide(allowed: boolean, level: number, perMinute: number): RateDecision {
  const perSecond = perMinute / 60
  return {
    allowed,
    limit: perMinute,
    remaining: Math.max(0, Math.floor(level)),
    resetSeconds: level >= perMinute ? 0 : Math.ceil((perMinute - level) / perSecond),
    retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil((1 - level) / perSecond)),
  }
}

/**
 * An SQLite store belongs to one service process (its file lives in that process's data folder),
 * so its buckets can live in that process's memory: same arithmetic, no write per request.
 * PostgreSQL deployments share buckets through the store, above.
 */
const memoryBuckets = new WeakMap<Store, Map<string, { tokens: number; at: number }>>()

function takeFromMemory(store: Store, key: string, perMinute: number): RateDecision {
  let buckets = memoryBuckets.get(store)
  if (!buckets) memoryBuckets.set(store, (buckets = new Map()))
  const now = Date.now()
  const b = buckets.get(key)
  const level = b ? Math.min(perMinute, b.tokens + ((now - b.at) * perMinute) / 60_000) : perMinute
  if (level < 1) return decide(false, level, perMinute)
  // Charged in place: one bucket object per token and bucket for the life of the process.
  if (b) {
    b.tokens = level - 1
    b.at = now
  } else buckets.set(key, { tokens: level - 1, at: now })
  return decide(true, level - 1, perMinute)
}
