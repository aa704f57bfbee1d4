import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Deps } from '../deps.ts'
import { errorResponses, notFound } from '../errors.ts'
import { MIB } from '../http/limits.ts'
import { ListEnvelope, listPage } from '../http/pagination.ts'
import { deleteTemplate } from './delete-environment.ts'
import { CreateTemplateBody, ListTemplatesQuery, Template, TemplateDeleted, TemplateParams } from './environments.schema.ts'
import { getTemplateRow, listTemplateRows, toTemplate } from './environments.store.ts'
import { putTemplate } from './put-template.ts'

export const templateRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { store }) => {
  app.post(
    '/environment-templates',
    {
      // Templates carry files under the same ceilings as session creation (10 MiB decoded), so
      // the body may be as large as that route's.
      bodyLimit: 16 * MIB,
      config: { scope: 'environments:write', idempotent: true },
      schema: {
        operationId: 'putEnvironmentTemplate',
        tags: ['environments'],
        summary: 'Create a template (201), or replace the one with this name (200)',
        body: CreateTemplateBody,
        response: { 200: Template, 201: Template, ...errorResponses(400) },
      },
    },
    async (req, reply) => {
      const { row, created } = await putTemplate(store, req.auth.orgId, req.body)
      return reply.code(created ? 201 : 200).send(toTemplate(row))
    },
  )

  app.get(
    '/environment-templates',
    {
      config: { scope: 'environments:read' },
      schema: {
        operationId: 'listEnvironmentTemplates',
        summary: 'List environment templates',
        tags: ['environments'],
        querystring: ListTemplatesQuery,
        response: { 200: ListEnvelope(Template), ...errorResponses(400) },
      },
    },
    async (req) => {
      return listPage(listTemplateRows(store.db, req.auth.orgId), req.query, (rows) => rows.map(toTemplate))
    },
  )

  app.get(
    '/environment-templates/:template_id',
    {
      config: { scope: 'environments:read' },
      schema: { operationId: 'getEnvironmentTemplate', summary: 'Read one environment template', tags: ['environments'], params: TemplateParams, response: { 200: Template, ...errorResponses(400, 404) } },
    },
    async (req) => {
      const row = await getTemplateRow(store.db, req.auth.orgId, req.params.template_id)
      if (!row) throw notFound('environment template', req.params.template_id)
      return toTemplate(row)
    },
  )

  app.delete(
    '/environment-templates/:template_id',
    {
      config: { scope: 'environments:write', idempotent: true },
      schema: {
        operationId: 'deleteEnvironmentTemplate',
        tags: ['environments'],
        summary: 'Delete a template and its stored files',
        params: TemplateParams,
        response: { 200: TemplateDeleted, ...errorResponses(400, 404) },
      },
    },
    async (req) => {
      await deleteTemplate(store, req.auth.orgId, req.params.template_id)
      return { object: 'environment.template.deleted' as const, id: req.params.template_id, deleted: true }
    },
  )
}
