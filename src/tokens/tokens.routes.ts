import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import type { Deps } from '../deps.ts'
import { errorResponses, notFound } from '../errors.ts'
import { ListEnvelope, OrderedListQuery, listPage } from '../http/pagination.ts'
import { CreateTokenBody, Token, TokenDeleted } from './tokens.schema.ts'
import { mintToken } from './mint-token.ts'
import { getToken, listTokenRows, revokeToken, toToken, type TokenRecord } from './tokens.store.ts'

export const toTokenShape = (t: TokenRecord, secret?: string) => ({
  object: 'token' as const,
  id: t.id,
  name: t.name,
  org_id: t.orgId,
  scopes: t.scopes,
  created_at: t.createdAt,
  expires_at: t.expiresAt,
  ...(secret ? { token: secret } : {}),
})

export const tokenRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { store }) => {
  app.post(
    '/tokens',
    {
      config: { scope: 'tokens:write', idempotent: true },
      schema: { operationId: 'createToken', tags: ['tokens'], summary: 'Mint a token; the secret is shown once', body: CreateTokenBody, response: { 201: Token, ...errorResponses(400) } },
    },
    async (req, reply) => {
      const { record, secret } = await mintToken(store.db, req.auth.tokenId, { name: req.body.name ?? null, scopes: req.body.scopes, days: req.body.expires_in_days })
      return reply.code(201).send(toTokenShape(record, secret))
    },
  )

  app.get(
    '/tokens',
    {
      config: { scope: 'tokens:write' },
      schema: { operationId: 'listTokens', tags: ['tokens'], summary: 'List the organization’s unrevoked tokens (expired ones included), never their secrets', querystring: Type.Object(OrderedListQuery, { additionalProperties: false }), response: { 200: ListEnvelope(Token), ...errorResponses(400) } },
    },
    async (req) => {
      // Revoked tokens have left the collection, so their ids are cursors that cannot be placed.
      return listPage(listTokenRows(store.db, req.auth.orgId), req.query, (rows) => rows.map((r) => toTokenShape(toToken(r))))
    },
  )

  app.delete(
    '/tokens/:token_id',
    {
      config: { scope: 'tokens:write', idempotent: true },
      schema: { operationId: 'revokeToken', summary: 'Revoke a token', tags: ['tokens'], params: Type.Object({ token_id: Type.String() }), response: { 200: TokenDeleted, ...errorResponses(404) } },
    },
    async (req) => {
      const t = await getToken(store.db, req.auth.orgId, req.params.token_id)
      if (!t || t.revokedAt !== null) throw notFound('token', req.params.token_id)
      await revokeToken(store.db, t.id)
      return { object: 'token.deleted' as const, id: t.id, deleted: true }
    },
  )
}
