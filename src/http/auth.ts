import type { FastifyContextConfig, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import { isStoreUnreachable, type Store } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { hashToken, type TokenRecord } from '../tokens/tokens.store.ts'
import { tokenLookup } from '../tokens/token-lookup.ts'
import { TOKEN_PREFIX } from '../tokens/scopes.ts'
import type { Config } from '../config.ts'
import { takeToken, takeTokenAtOnce, type RateDecision } from './rate-limit.ts'
import './context.ts'

const RETRY_AFTER_UNAVAILABLE = '5'
const BEARER = /^Bearer\s+(\S+)\s*$/i

/**
 * Authenticates, charges the rate-limit bucket and checks the scope, in that order, so that every
 * authenticated answer (a 403 included) carries the x-ratelimit-* headers. One hook a route, made
 * from the route's config: reading it from the request (req.routeOptions) builds an object each time.
 * A callback hook, not an async one: a token kept in memory with a bucket kept in memory (SQLite)
 * is answered within the call, with no promise and no microtask hop; only a store read waits.
 */
export function authHook(store: Store, config: Config, passedOn: (headers: FastifyRequest['headers']) => boolean = () => false) {
  const tokens = tokenLookup(store)
  return (cfg: FastifyContextConfig) => {
    const bucket = cfg.bucket ?? 'general'
    const perMinute = bucket === 'sessions' ? config.rateSessionsPerMin : config.rateGeneralPerMin
    const scope = cfg.scope

    /** Undefined when the request is settled at once; otherwise the wait for the store. */
    const authenticate = (req: FastifyRequest, reply: FastifyReply): Promise<void> | undefined => {
      const hash = hashToken(bearerSecret(req.headers.authorization))
      let token: TokenRecord | undefined
      try {
        // Read once here: the request's other reads from memory reuse it (readMark).
        req.readMark = store.writeMark?.()
        token = tokens.kept(hash, req.readMark)
      } catch (err) {
        throw unreachable(err)
      }
      if (token !== undefined) return admit(req, reply, token)
      return tokens.find(hash, req.readMark).then(
        (found) => admit(req, reply, found),
        (err: unknown) => {
          throw unreachable(err)
        },
      )
    }

    const admit = (req: FastifyRequest, reply: FastifyReply, token: TokenRecord | null): Promise<void> | undefined => {
      if (!token) throw new ApiError('authentication_error', 'Unrecognised access token.')
      if (token.revokedAt !== null) throw new ApiError('authentication_error', 'This access token has been revoked.')
      if (token.expiresAt <= Date.now()) throw new ApiError('authentication_error', 'This access token has expired; mint a new one.')
      req.auth = { tokenId: token.id, orgId: token.orgId, scopes: token.scopes }
      // Passed on by the node the caller reached, which charged the bucket already: once is enough.
      if (passedOn(req.headers)) {
        if (scope && !token.scopes.includes(scope)) throw new ApiError('permission_denied', `This token lacks the scope "${scope}".`)
        return undefined
      }
      const rate = takeTokenAtOnce(store, token.id, bucket, perMinute)
      if (rate) return charge(reply, token, rate)
      return takeToken(store, token.id, bucket, perMinute).then((r) => charge(reply, token, r))
    }

    const charge = (reply: FastifyReply, token: TokenRecord, rate: RateDecision): undefined => {
      reply.header('x-ratelimit-limit', String(rate.limit))
      reply.header('x-ratelimit-remaining', String(rate.remaining))
      reply.header('x-ratelimit-reset', String(rate.resetSeconds))
      reply.header('x-ratelimit-resource', bucket)
      if (!rate.allowed) {
        throw new ApiError('rate_limit_exceeded', `Rate limit of ${rate.limit} requests a minute exceeded for the ${bucket} bucket; retry after ${rate.retryAfterSeconds} s.`, {
          headers: { 'retry-after': String(rate.retryAfterSeconds) },
        })
      }
      if (scope && !token.scopes.includes(scope)) throw new ApiError('permission_denied', `This token lacks the scope "${scope}".`)
      return undefined
    }

    return function authenticateHook(req: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
      let waiting: Promise<void> | undefined
      try {
        waiting = authenticate(req, reply)
      } catch (err) {
        done(err as Error)
        return
      }
      if (waiting) waiting.then(() => done(), done)
      else done()
    }
  }
}

/** The secret of a bearer Authorization header, or the 401 that says what is wrong with it. */
function bearerSecret(header: string | undefined): string {
  const match = typeof header === 'string' ? BEARER.exec(header) : null
  if (!match) throw new ApiError('authentication_error', 'Missing bearer token: send "Authorization: Bearer svc_pat_…".')
  const secret = match[1]!
  if (!secret.startsWith(TOKEN_PREFIX)) throw new ApiError('authentication_error', 'Unrecognised access token.')
  return secret
}

function unreachable(err: unknown): unknown {
  if (!isStoreUnreachable(err)) return err
  return new ApiError('directory_unavailable', 'The token directory cannot be reached; retry shortly.', {
    cause: err,
    headers: { 'retry-after': RETRY_AFTER_UNAVAILABLE },
  })
}
