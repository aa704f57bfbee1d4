import { Type } from 'typebox'

export const Usage = Type.Object(
  {
    object: Type.Literal('session.usage'),
    session_id: Type.String(),
    scope: Type.Union([Type.Literal('session'), Type.Literal('tree')]),
    as_of: Type.Integer({ description: 'Unix ms; a running sandbox is counted up to this moment.' }),
    sandbox_seconds: Type.Integer({ description: 'Settled, pending reconciliation and still running. Not a bill.' }),
    chargeable_seconds: Type.Integer({ description: 'The reconciled subset; never more than sandbox_seconds.' }),
    needs_review_intervals: Type.Integer({ description: 'Intervals whose duration is unknown (their end was lost in a crash); not summed.' }),
    sessions: Type.Integer(),
    intervals: Type.Integer({ description: 'Intervals that went in, excluding those marked not billable.' }),
  },
  { $id: 'Usage', additionalProperties: false },
)

export const UsageQuery = Type.Object(
  { root: Type.Optional(Type.String({ description: 'Aggregates the whole tree under the session; must equal the path session id.' })) },
  { additionalProperties: false },
)
