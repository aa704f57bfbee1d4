import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Deps } from '../deps.ts'
import { errorResponses, notFound } from '../errors.ts'
import { ListEnvelope, listPage } from '../http/pagination.ts'
import { createProfile } from './create-profile.ts'
import { deleteProfile } from './delete-environment.ts'
import { CreateProfileBody, ListProfilesQuery, Profile, ProfileDeleted, ProfileParams } from './environments.schema.ts'
import { getProfileRow, listProfileRows, toProfile } from './environments.store.ts'

export const profileRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, deps) => {
  const { store } = deps

  app.post(
    '/environment-profiles',
    {
      config: { scope: 'environments:write', idempotent: true },
      schema: {
        operationId: 'createEnvironmentProfile',
        tags: ['environments'],
        summary: 'Store variables for workspaces; values are write-only',
        body: CreateProfileBody,
        response: { 201: Profile, ...errorResponses(400, 409) },
      },
    },
    async (req, reply) => reply.code(201).send(toProfile(await createProfile(deps, req.auth.orgId, req.body))),
  )

  app.get(
    '/environment-profiles',
    {
      config: { scope: 'environments:read' },
      schema: {
        operationId: 'listEnvironmentProfiles',
        summary: 'List environment profiles',
        tags: ['environments'],
        querystring: ListProfilesQuery,
        response: { 200: ListEnvelope(Profile), ...errorResponses(400) },
      },
    },
    async (req) => {
      return listPage(listProfileRows(store.db, req.auth.orgId), req.query, (rows) => rows.map(toProfile))
    },
  )

  app.get(
    '/environment-profiles/:profile_id',
    {
      config: { scope: 'environments:read' },
      schema: { operationId: 'getEnvironmentProfile', summary: 'Read one environment profile', tags: ['environments'], params: ProfileParams, response: { 200: Profile, ...errorResponses(400, 404) } },
    },
    async (req) => {
      const row = await getProfileRow(store.db, req.auth.orgId, req.params.profile_id)
      if (!row) throw notFound('environment profile', req.params.profile_id)
      return toProfile(row)
    },
  )

  app.delete(
    '/environment-profiles/:profile_id',
    {
      config: { scope: 'environments:write', idempotent: true },
      schema: {
        operationId: 'deleteEnvironmentProfile',
        tags: ['environments'],
        summary: 'Delete a profile; templates that named it stop naming it',
        params: ProfileParams,
        response: { 200: ProfileDeleted, ...errorResponses(400, 404) },
      },
    },
    async (req) => {
      await deleteProfile(store, req.auth.orgId, req.params.profile_id)
      return { object: 'environment.profile.deleted' as const, id: req.params.profile_id, deleted: true }
    },
  )
}
