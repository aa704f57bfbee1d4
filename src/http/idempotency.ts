import { createHash } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Store } from '../db/database.ts'
import type { SecretBox } from '../shared/secret-box.ts'
import { Type } from 'typebox'
import { ApiError } from '../errors.ts'
import './context.ts'

/** Keys are kept at least this long; older ones are forgotten and may be reused. */
export const IDEMPOTENCY_TTL_MS = 24 * 3_600_000
const MAX_KEY_LENGTH = 255

/** The header as routes that honour it describe it; claimKey enforces its rules (and says so in its own words). */
export const IdempotencyKeyHeader = Type.Optional(
  Type.String({ description: `1 to ${MAX_KEY_LENGTH} characters. A retry with the same key returns the first answer; an identical request still in flight gets 409.` }),
)
/**
 * A claim older than this whose answer never came belonged to a process that died mid-request:
 * it is released rather than answering 409 for a day. No request here runs anywhere near as long.
 */
export const IN_FLIGHT_ABANDONED_MS = 5 * 60_000

const fingerprint = (req: FastifyRequest): string =>
  createHash('sha256')
    .update(`${req.method} ${req.url}\n${JSON.stringify(req.body ?? null)}`)
    .digest('hex')

/**
 * Runs before the handler: claims the key for this request, or answers from the first response,
 * or refuses an identical request still in flight. Keys are scoped to the token.
 */
export function idempotencyPreHandler(store: Store, box: SecretBox, nodeId: () => string) {
  return async function claimKey(req: FastifyRequest, reply: FastifyReply): Promise<unknown> {
    const raw = req.headers['idempotency-key']
    if (raw === undefined) return
    const key = Array.isArray(raw) ? raw[0]! : raw
    if (key.length === 0 || key.length > MAX_KEY_LENGTH) {
      throw new ApiError('invalid_request', `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters.`)
    }
    const fp = fingerprint(req)
    const tokenId = req.auth.tokenId
    const now = Date.now()
    for (let attempt = 0; attempt < 2; attempt++) {
      const claimed = await store.db
        .insertInto('idempotency_keys')
        .values({ token_id: tokenId, key, fingerprint: fp, state: 'in_flight', status_code: null, body: null, created_at: now, node_id: nodeId() })
        .onConflict((oc) => oc.columns(['token_id', 'key']).doNothing())
        .returning('key')
        .executeTakeFirst()
      if (claimed) {
        req.idempotencyKey = key
        return
      }
      const row = await store.db
        .selectFrom('idempotency_keys')
        .selectAll()
        .where('token_id', '=', tokenId)
        .where('key', '=', key)
        .executeTakeFirst()
      if (!row) continue
      const age = now - Number(row.created_at)
      if (age > IDEMPOTENCY_TTL_MS || (row.state === 'in_flight' && (age > IN_FLIGHT_ABANDONED_MS || (await claimantGone(store, row.node_id))))) {
        await store.db.deleteFrom('idempotency_keys').where('token_id', '=', tokenId).where('key', '=', key).execute()
        continue
      }
      if (row.fingerprint !== fp) {
        throw new ApiError('invalid_request', `Idempotency-Key "${key}" was already used for a different request.`)
      }
      if (row.state === 'in_flight') {
        throw new ApiError('conflict', `A request with Idempotency-Key "${key}" is still in flight.`)
      }
      reply.header('idempotent-replayed', 'true')
      reply.code(row.status_code ?? 200).type('application/json; charset=utf-8')
      return reply.send(row.body === null ? null : box.open(row.body))
    }
    throw new ApiError('conflict', `Idempotency-Key "${key}" could not be claimed; retry.`)
  }
}

/**
 * Whether the node that claimed a key in flight is gone (stopped, or declared dead): its request
 * died with it, and a retry acts again at once. What it did before it died is the same unknown a
 * request cut by any crash leaves (its answer was never recorded), so a retry of a create may
 * repeat it; waiting minutes would not tell either.
 */
async function claimantGone(store: Store, nodeId: string): Promise<boolean> {
  if (nodeId === '') return false
  const row = await store.db.selectFrom('nodes').select('stopped_at').where('id', '=', nodeId).executeTakeFirst()
  return !row || row.stopped_at !== null
}

/**
 * Records the first answer under the key; a 5xx releases the key so that a retry acts again.
 * The answer is sealed: it may hold a secret shown once (a token, a webhook secret).
 */
export function idempotencyOnSend(store: Store, box: SecretBox) {
  return async function recordAnswer(req: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> {
    const key = req.idempotencyKey
    if (!key) return payload
    req.idempotencyKey = undefined
    if (reply.statusCode >= 500 || typeof payload !== 'string') {
      await store.db.deleteFrom('idempotency_keys').where('token_id', '=', req.auth.tokenId).where('key', '=', key).execute()
    } else {
      await store.db
        .updateTable('idempotency_keys')
        .set({ state: 'done', status_code: reply.statusCode, body: box.seal(payload) })
        .where('token_id', '=', req.auth.tokenId)
        .where('key', '=', key)
        .execute()
    }
    return payload
  }
}

/** Forgets keys past their time; called now and then, not on the request path. */
export async function purgeIdempotencyKeys(store: Store): Promise<void> {
  await store.db.deleteFrom('idempotency_keys').where('created_at', '<', Date.now() - IDEMPOTENCY_TTL_MS).execute()
}
