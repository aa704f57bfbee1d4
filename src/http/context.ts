import type { FastifyRequest } from 'fastify'
import type { Scope } from '../tokens/scopes.ts'

/** Who is calling, resolved from the bearer token. */
export type Auth = { tokenId: string; orgId: string; scopes: Scope[] }

declare module 'fastify' {
  interface FastifyRequest {
    auth: Auth
    /** Set when the request carries an Idempotency-Key this process now owns. */
    idempotencyKey?: string
    /**
     * The store's write mark (SQLite) as read when the request was authenticated: a read kept
     * under it shows the store as it was at that instant, which lies within this request.
     */
    readMark?: string
  }
  interface FastifyContextConfig {
    /** No token needed (the OpenAPI description). */
    public?: boolean
    /** The scope the token must carry. A route declares this, `anyToken` or `public`, or the service does not start. */
    scope?: Scope
    /** Any valid token, whatever its scopes (the health check, which reports them). */
    anyToken?: boolean
    /** Which rate-limit bucket the call draws from; `general` unless said. */
    bucket?: 'sessions' | 'general'
    /** Accepts Idempotency-Key. */
    idempotent?: boolean
    /**
     * Whether the route acts on the session's workspace itself (files put into it, its ports read),
     * and so runs on the node that owns the session: true, always; a function, for the requests it
     * holds for (a message with files); false, wherever it arrives. Every route under a session says
     * which, or the service does not start; one hook (app.ts) passes such a request on to the owner.
     */
    onOwnersNode?: boolean | ((req: FastifyRequest) => boolean)
    /** Body and query string belong to someone else (the preview proxy): neither is checked. */
    passThrough?: boolean
  }
}
