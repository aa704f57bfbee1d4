import type { FastifyContextConfig, FastifyReply, FastifyRequest } from 'fastify'
import { isStoreUnreachable, type Store } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { hashToken } from '../tokens/tokens.store.ts'
import { tokenLookup } from '../tokens/token-lookup.ts'
import { TOKEN_PREFIX } from '../tokens/scopes.ts'
import type { Config } from '../config.ts'
import { takeToken } from './rate-limit.ts'
import './context.ts'

const RETRY_AFTER_UNAVAILABLE = '5'

/**
 * Authenticates, charges the rate-limit bucket and checks the scope, in that order, so that every
 * authenticated answer (a 403 included) carries the x-ratelimit-* headers. One hook a route, made
 * from the route's config: reading it from the request (req.routeOptions) builds an object each time.
 */
export function authHook(store: Store, config: Config) {
  const findToken = tokenLookup(store)
  return (cfg: FastifyContextConfig) => async function authenticate(req: FastifyRequest, reply: FastifyReply): Promise<void> {
    const header = req.headers.authorization
    const match = typeof header === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null
    if (!match) throw new ApiError('authentication_error', 'Missing bearer token: send "Authorization: Bearer svc_pat_…".')
    const secret = match[1]!
    if (!secret.startsWith(TOKEN_PREFIX)) throw new ApiError('authentication_error', 'Unrecognised access token.')
    let token
    try {
      // Read once here: the request's other reads from memory reuse it (readMark).
      req.readMark = store.writeMark?.()
      token = await findToken(hashToken(secret), req.readMark)
    } catch (err) {
      if (isStoreUnreachable(err)) {
        throw new ApiError('directory_unavailable', 'The token directory cannot be reached; retry shortly.', {
          cause: err,
          headers: { 'retry-after': RETRY_AFTER_UNAVAILABLE },
        })
      }
      throw err
    }
    if (!token) throw new ApiError('authentication_error', 'Unrecognised access token.')
    if (token.revokedAt !== null) throw new ApiError('authentication_error', 'This access token has been revoked.')
    if (token.expiresAt <= Date.now()) throw new ApiError('authentication_error', 'This access token has expired; mint a new one.')
    req.auth = { tokenId: token.id, orgId: token.orgId, scopes: token.scopes }

    const bucket = cfg.bucket ?? 'general'
    const perMinute = bucket === 'sessions' ? config.rateSessionsPerMin : config.rateGeneralPerMin
    const rate = await takeToken(store, token.id, bucket, perMinute)
    reply.header('x-ratelimit-limit', String(rate.limit))
    reply.header('x-ratelimit-remaining', String(rate.remaining))
    reply.header('x-ratelimit-reset', String(rate.resetSeconds))
    reply.header('x-ratelimit-resource', bucket)
    if (!rate.allowed) {
      throw new ApiError('rate_limit_exceeded', `Rate limit of ${rate.limit} requests a minute exceeded for the ${bucket} bucket; retry after ${rate.retryAfterSeconds} s.`, {
        headers: { 'retry-after': String(rate.retryAfterSeconds) },
      })
    }
    if (cfg.scope && !token.scopes.includes(cfg.scope)) {
      throw new ApiError('permission_denied', `This token lacks the scope "${cfg.scope}".`)
    }
  }
}
