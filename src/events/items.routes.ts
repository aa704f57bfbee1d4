import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { requireSession } from '../sessions/require-session.ts'
import type { Deps } from '../deps.ts'
import { nameRoots } from '../http/openapi.ts'
import { errorResponses } from '../errors.ts'
import { ListEnvelope, emptyList, toList } from '../http/pagination.ts'
import { SessionParams } from '../sessions/sessions.schema.ts'
import { getSessionEvent, listSessionEvents, type StoredEvent } from './events.store.ts'
import { Item, ListItemsQuery, PublishedItem } from './items.schema.ts'
import { PUBLISHED_EVENTS, persistedInternalTypes, publicName } from './vocabulary.ts'

/** An item is a persisted, published event read back from the log; its id carries the seq. */
const itemId = (seq: number) => `itm_${seq}`
const seqOf = (id: string): number | null => (/^itm_\d+$/.test(id) ? Number(id.slice(4)) : null)

export function toItem(e: StoredEvent) {
  const name = publicName(e.type)!
  return {
    object: 'item' as const,
    id: itemId(e.seq),
    type: PUBLISHED_EVENTS[name]!.item!,
    turn_id: e.turnId,
    created_at: e.createdAt,
    detail: { event: name, ...e.payload },
  }
}

export const itemRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { store }) => {
  const types = persistedInternalTypes()
  app.get(
    '/sessions/:session_id/items',
    {
      // Described with detail as a union; served with it open (see Item).
      config: { scope: 'sessions:read', onOwnersNode: false, swaggerTransform: ({ schema, url }) => ({ url, schema: nameRoots({ ...schema, response: { ...(schema.response as object), 200: ListEnvelope(PublishedItem) } }) as never }) },
      schema: {
        operationId: 'listItems',
        tags: ['sessions'],
        summary: 'The durable record of the same facts as the persisted events',
        params: SessionParams,
        querystring: ListItemsQuery,
        response: { 200: ListEnvelope(Item), ...errorResponses(400, 404) },
      },
    },
    async (req) => {
      const q = req.query
      const session = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      let afterSeq: number | undefined
      if (q.after !== undefined) {
        const seq = seqOf(q.after)
        const cursor = seq === null ? null : await getSessionEvent(store.db, session.id, seq)
        if (!cursor || !types.includes(cursor.type)) return emptyList()
        afterSeq = seq!
      }
      const limit = q.limit ?? 20
      const rows = await listSessionEvents(store.db, { sessionId: session.id, types, turnId: q.turn_id, afterSeq, limit, order: q.order ?? 'desc' })
      return toList(rows.map(toItem), limit)
    },
  )
}
