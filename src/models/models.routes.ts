import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import type { Deps } from '../deps.ts'
import { errorResponses, notFound } from '../errors.ts'
import { ListEnvelope, PlainListQuery, listPage } from '../http/pagination.ts'
import { connectModel } from './connect-model.ts'
import { deleteCredential } from './delete-credential.ts'
import { CreateModelCredentialBody, CredentialParams, ModelCredential, ModelCredentialDeleted, type Provider } from './models.schema.ts'
import { getCredentialView, listCredentialRows, toCredentialView, type CredentialView } from './models.store.ts'

export const toCredentialShape = (c: CredentialView): ModelCredential => ({
  object: 'model_credential',
  id: c.id,
  provider: c.provider as Provider,
  base_url: c.baseUrl,
  name: c.name,
  models: c.models,
  default: c.isDefault,
  key_hint: c.keyHint,
  created_at: c.createdAt,
})

const tags = ['model-credentials']

export const modelCredentialRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { store, box, config }) => {
  app.post(
    '/model-credentials',
    {
      config: { scope: 'models:write', idempotent: true },
      schema: {
        operationId: 'createModelCredential',
        tags,
        summary: 'Connect a model provider; the same provider, address and key again returns the existing connection with 200',
        body: CreateModelCredentialBody,
        response: { 200: ModelCredential, 201: ModelCredential, ...errorResponses(400, 502) },
      },
    },
    async (req, reply) => {
      const { credential, created } = await connectModel(store, box, config.modelAllowPrivate, req.auth.orgId, req.body)
      return reply.code(created ? 201 : 200).send(toCredentialShape(credential))
    },
  )

  app.get(
    '/model-credentials',
    {
      config: { scope: 'models:read' },
      schema: {
        operationId: 'listModelCredentials',
        tags,
        summary: 'List the organization’s model connections, newest first',
        querystring: Type.Object(PlainListQuery, { additionalProperties: false }),
        response: { 200: ListEnvelope(ModelCredential), ...errorResponses(400) },
      },
    },
    async (req) => {
      return listPage(listCredentialRows(store.db, req.auth.orgId), req.query, (rows) => rows.map((r) => toCredentialShape(toCredentialView(r))))
    },
  )

  app.get(
    '/model-credentials/:credential_id',
    {
      config: { scope: 'models:read' },
      schema: { operationId: 'getModelCredential', summary: 'Read one model connection', tags, params: CredentialParams, response: { 200: ModelCredential, ...errorResponses(404) } },
    },
    async (req) => {
      const c = await getCredentialView(store.db, req.auth.orgId, req.params.credential_id)
      if (!c) throw notFound('model connection', req.params.credential_id)
      return toCredentialShape(c)
    },
  )

  app.delete(
    '/model-credentials/:credential_id',
    {
      config: { scope: 'models:write', idempotent: true },
      schema: {
        operationId: 'deleteModelCredential',
        tags,
        summary: 'Remove a connection; sessions on it move to the default connection, or are left with none',
        params: CredentialParams,
        response: { 200: ModelCredentialDeleted, ...errorResponses(400, 404) },
      },
    },
    async (req) => deleteCredential(store, req.auth.orgId, req.params.credential_id),
  )
}
