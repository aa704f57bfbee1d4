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
        images: Type.Union(
          [
            Type.Object(
              {
                overlay: Type.Boolean({ description: "The host mounts an image's layers under a workspace's own writable layer: workspaces on an image can start here." }),
                uid_ranges: Type.Boolean({ description: 'The host maps the layers onto a range of host uids of a workspace’s own (idmapped mounts): a workspace on an image can run as root inside.' }),
                root_ranges: Type.Integer({ minimum: 0, description: 'How many workspaces on an image may run as root inside at once (WARREN_SANDBOX_ROOT_RANGES); 0: they run as their unprivileged uid.' }),
              },
              { additionalProperties: false },
            ),
            Type.Null(),
          ],
          { description: "What this node's host offers workspaces on an image, as its start-up report found it; null when its sandbox provider runs no images." },
        ),
      },
      { additionalProperties: false },
    ),
  },
  { $id: 'Health', additionalProperties: false },
)
