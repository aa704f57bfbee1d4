import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { SwaggerTransform } from '@fastify/swagger'
import { Type } from 'typebox'
import type { Deps } from '../deps.ts'
import { nameRoots } from '../http/openapi.ts'
import { ApiError, errorResponses } from '../errors.ts'
import { requireSession } from '../sessions/require-session.ts'
import { SessionParams } from '../sessions/sessions.schema.ts'
import { Preview, PreviewDeleted, PublishPreviewBody } from './previews.schema.ts'
import { previewOfSession } from './previews.store.ts'
import { publishPreview, unpublishPreview } from './publish-preview.ts'

const PROXY_PREFIX = '/preview/proxy'

/**
 * The router calls the rest of the path `*`, a name no OpenAPI path template can hold: the
 * description calls it `path` (one segment or many), and the router keeps its wildcard.
 */
const describeWildcard: SwaggerTransform = ({ schema, url }) => ({
  url: url.replace(/\/\*$/, '/:path'),
  schema: nameRoots({ ...schema, params: Type.Object({ session_id: Type.String(), path: Type.String({ description: "The rest of the site's path, slashes included." }) }) }) as never,
})

export const previewRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, deps) => {
  const { store, previews } = deps

  app.post(
    '/sessions/:session_id/preview',
    {
      // The ports are read in the workspace: on the node that runs it.
      config: { scope: 'sessions:write', idempotent: true, onOwnersNode: true },
      schema: {
        operationId: 'publishPreview',
        tags: ['previews'],
        summary: 'Publish a port served in the workspace at a public address on this service',
        params: SessionParams,
        body: PublishPreviewBody,
        response: { 200: Preview, ...errorResponses(400, 404, 409) },
      },
    },
    async (req) => {
      const preview = await publishPreview(deps, req.auth.orgId, req.params.session_id, req.body ?? {})
      // What was open to the previous address or port ends: the preview is what this call says now.
      previews.cut(req.params.session_id)
      return preview
    },
  )

  app.delete(
    '/sessions/:session_id/preview',
    {
      // Its open connections end on the node that runs the workspace (the others only pipe to
      // it): the cut below must happen there.
      config: { scope: 'sessions:write', idempotent: true, onOwnersNode: true },
      schema: {
        operationId: 'deletePreview',
        tags: ['previews'],
        summary: 'Take the preview off its public address; open connections are cut at once',
        params: SessionParams,
        response: { 200: PreviewDeleted, ...errorResponses(404) },
      },
    },
    async (req) => {
      const id = req.params.session_id
      if (!(await unpublishPreview(deps, req.auth.orgId, id))) throw new ApiError('not_found', `Session "${id}" has no preview.`)
      previews.cut(id)
      return { object: 'preview.deleted' as const, id, deleted: true }
    },
  )

  // The session's `preview.url`: the same site for a caller holding a token, under the API's own
  // address. Bodies and query strings are the site's, passed through untouched.
  await app.register(async (raw) => {
    raw.removeAllContentTypeParsers()
    raw.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined))
    const methods = [
      ['GET', 'sessions:read'],
      ['POST', 'sessions:write'],
      ['PUT', 'sessions:write'],
      ['PATCH', 'sessions:write'],
      ['DELETE', 'sessions:write'],
    ] as const
    // The site's root and every path under it (the router ignores a trailing slash, so the root
    // `…/proxy/` is a route of its own).
    for (const [method, scope] of methods) for (const path of ['', '/*']) {
      raw.route({
        method,
        url: `/sessions/:session_id${PROXY_PREFIX}${path}`,
        config: { scope, onOwnersNode: false, passThrough: true, ...(path ? { swaggerTransform: describeWildcard } : {}) },
        schema: {
          operationId: `${method.toLowerCase()}Preview${path ? 'Path' : 'Root'}WithToken`,
          tags: ['previews'],
          summary: `The session's preview ${path ? 'at a path' : 'root'} for a token holder (${scope}); the site gets the rest of the path, the query and the body, never the token`,
          params: path ? Type.Object({ session_id: Type.String(), '*': Type.String() }) : SessionParams,
          querystring: Type.Object({}, { additionalProperties: true }),
          response: { 200: { description: "Whatever the workspace's server answers; the service's own 502 page when it cannot be reached" }, ...errorResponses(404) },
        },
        handler: async (req, reply) => {
          const session = await requireSession(store.db, req.auth.orgId, (req.params as { session_id: string }).session_id)
          const row = await previewOfSession(store.db, session.id)
          if (!row) throw new ApiError('not_found', `Session "${session.id}" has no preview.`)
          const url = req.raw.url ?? ''
          const rest = url.slice(url.indexOf(PROXY_PREFIX) + PROXY_PREFIX.length)
          reply.hijack()
          await previews.serve(row, req.raw, reply.raw, rest.startsWith('/') ? rest : `/${rest}`)
        },
      })
    }
  })
}
