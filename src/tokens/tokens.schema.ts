import { Type, type Static } from 'typebox'
import { SCOPES } from './scopes.ts'

export const ScopeName = Type.Union(SCOPES.map((s) => Type.Literal(s)), { description: 'A scope name' })

export const Token = Type.Object(
  {
    object: Type.Literal('token'),
    id: Type.String(),
    name: Type.Union([Type.String(), Type.Null()]),
    org_id: Type.String(),
    scopes: Type.Array(Type.String()),
    created_at: Type.Integer({ description: 'Unix ms' }),
    expires_at: Type.Integer({ description: 'Unix ms' }),
    token: Type.Optional(Type.String({ description: 'The secret, svc_pat_…: returned by the mint call only, once.' })),
  },
  { $id: 'Token', additionalProperties: false },
)
export type Token = Static<typeof Token>

export const CreateTokenBody = Type.Object(
  {
    name: Type.Optional(Type.String({ maxLength: 200 })),
    scopes: Type.Array(ScopeName, { minItems: 1, uniqueItems: true, description: 'Must be a subset of the calling token’s scopes.' }),
    expires_in_days: Type.Union([Type.Literal(7), Type.Literal(30), Type.Literal(90)]),
  },
  { $id: 'CreateTokenRequest', additionalProperties: false },
)

export const TokenDeleted = Type.Object(
  { object: Type.Literal('token.deleted'), id: Type.String(), deleted: Type.Boolean() },
  { $id: 'TokenDeleted', additionalProperties: false },
)

export const Health = Type.Object(
  {
    object: Type.Literal('health'),
    status: Type.Literal('ok'),
    org_id: Type.String(),
    token_id: Type.String(),
    scopes: Type.Array(Type.String()),
    node: Type.Object(
      {
        id: Type.String({ description: 'The node (one `warren serve`) that answered.' }),
        peers: Type.Array(
          Type.Object(
            {
              id: Type.String(),
              live: Type.Boolean({ description: 'Its heartbeat is fresh: it holds its sessions’ leases.' }),
              started_at: Type.Integer({ description: 'Unix ms.' }),
              heartbeat_at: Type.Integer({ description: 'Unix ms, by the store’s clock.' }),
            },
            { additionalProperties: false },
          ),
          { description: 'Every node of the service this one knows, itself included (addresses are not shown).' },
        ),
      },
      { additionalProperties: false },
    ),
  },
  { $id: 'Health', additionalProperties: false },
)
