import { Type } from 'typebox'

export const Item = Type.Object(
  {
    object: Type.Literal('item'),
    id: Type.String(),
    type: Type.String({ description: 'Item type; tool_call covers both agent.tool_call and agent.tool_result. Branch on detail.event.' }),
    turn_id: Type.Union([Type.String(), Type.Null()]),
    created_at: Type.Integer(),
    detail: Type.Record(Type.String(), Type.Unknown(), { description: 'detail.event is the event name; the rest is that event’s payload.' }),
  },
  { additionalProperties: false },
)

export const ListItemsQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    order: Type.Optional(Type.Union([Type.Literal('asc'), Type.Literal('desc')], { default: 'desc' })),
    after: Type.Optional(Type.String()),
    turn_id: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
)
