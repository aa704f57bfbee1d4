import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Deps } from '../deps.ts'
import { errorResponses, notFound } from '../errors.ts'
import { ListEnvelope, listPage } from '../http/pagination.ts'
import { createSubscription } from './create-subscription.ts'
import { removeSubscription } from './delete-subscription.ts'
import { CreateWebhookBody, ListWebhooksQuery, WebhookDeleted, WebhookParams, WebhookSubscription } from './webhooks.schema.ts'
import { deliveryStats, getSubscriptionRow, listSubscriptionRows, toSubscription } from './webhooks.store.ts'

export const webhookRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, deps) => {
  const { store } = deps

  app.post(
    '/webhooks',
    {
      config: { scope: 'webhooks:write', idempotent: true },
      schema: {
        operationId: 'createWebhook',
        tags: ['webhooks'],
        summary: 'Subscribe a url to webhook events; the signing secret is shown once',
        body: CreateWebhookBody,
        response: { 201: WebhookSubscription, ...errorResponses(400, 409) },
      },
    },
    async (req, reply) => {
      const { row, secret } = await createSubscription(deps, req.auth.orgId, req.body)
      return reply.code(201).send(toSubscription(row, undefined, secret))
    },
  )

  app.get(
    '/webhooks',
    {
      config: { scope: 'webhooks:read' },
      schema: {
        operationId: 'listWebhooks',
        tags: ['webhooks'],
        summary: 'List subscriptions with their delivery counters, never their secrets',
        querystring: ListWebhooksQuery,
        response: { 200: ListEnvelope(WebhookSubscription), ...errorResponses(400) },
      },
    },
    async (req) => {
      return listPage(listSubscriptionRows(store.db, req.auth.orgId), req.query, async (rows) => {
        const stats = await deliveryStats(store.db, rows.map((r) => r.id))
        return rows.map((r) => toSubscription(r, stats.get(r.id)))
      })
    },
  )

  app.get(
    '/webhooks/:webhook_id',
    {
      config: { scope: 'webhooks:read' },
      schema: { operationId: 'getWebhook', summary: 'Read one webhook subscription', tags: ['webhooks'], params: WebhookParams, response: { 200: WebhookSubscription, ...errorResponses(400, 404) } },
    },
    async (req) => {
      const row = await getSubscriptionRow(store.db, req.auth.orgId, req.params.webhook_id)
      if (!row) throw notFound('webhook subscription', req.params.webhook_id)
      return toSubscription(row, (await deliveryStats(store.db, [row.id])).get(row.id))
    },
  )

  app.delete(
    '/webhooks/:webhook_id',
    {
      config: { scope: 'webhooks:write', idempotent: true },
      schema: {
        operationId: 'deleteWebhook',
        tags: ['webhooks'],
        summary: 'Remove a subscription and its pending deliveries',
        params: WebhookParams,
        response: { 200: WebhookDeleted, ...errorResponses(400, 404) },
      },
    },
    async (req) => {
      await removeSubscription(store, req.auth.orgId, req.params.webhook_id)
      return { object: 'webhook.subscription.deleted' as const, id: req.params.webhook_id, deleted: true }
    },
  )
}
