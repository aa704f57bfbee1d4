import { Type, type TSchema } from 'typebox'
import { ItemDetail } from './published.schema.ts'

const itemWith = <D extends TSchema>(detail: D, name?: string) =>
  Type.Object(
    {
      object: Type.Literal('item'),
      id: Type.String(),
      type: Type.String({ description: 'Item type; tool_call covers both agent.tool_call and agent.tool_result. Branch on detail.event.' }),
      turn_id: Type.Union([Type.String(), Type.Null()]),
      created_at: Type.Integer(),
      detail,
    },
    { additionalProperties: false, ...(name ? { $id: name } : {}) },
  )

/**
 * The item as the route serializes it: `detail` open. A union there would be compiled into the
 * serializer, which picks the first branch a value matches and throws when none does: a row an
 * older version wrote (a field since dropped or added) would become a 500 instead of coming back
 * as stored. The description shows PublishedItem instead.
 */
export const Item = itemWith(Type.Record(Type.String(), Type.Unknown(), { description: 'detail.event is the event name; the rest is that event’s payload.' }))

/** The item as the OpenAPI description shows it: `detail` a union on `detail.event`. */
export const PublishedItem = itemWith(ItemDetail, 'Item')

export const ListItemsQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    order: Type.Optional(Type.Union([Type.Literal('asc'), Type.Literal('desc')], { default: 'desc' })),
    after: Type.Optional(Type.String()),
    turn_id: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
)
