import { Type, type Static } from 'typebox'
import { SUBDOMAIN_PATTERN } from './preview-address.ts'

export const PublishPreviewBody = Type.Object(
  {
    subdomain: Type.Optional(
      Type.String({
        pattern: SUBDOMAIN_PATTERN,
        description: '2 to 63 characters of a-z, 0-9 and hyphen. Derived from the session when omitted. Taken by another session: 409.',
      }),
    ),
    port: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 65535,
        description: 'An addition: the workspace port to serve. When omitted, the lowest port a process in the workspace listens on; none listening: 409.',
      }),
    ),
  },
  { $id: 'PublishPreviewRequest', additionalProperties: false },
)
export type PublishPreviewBody = Static<typeof PublishPreviewBody>

export const Preview = Type.Object(
  {
    object: Type.Literal('preview'),
    subdomain: Type.String({ description: 'The label the site is served under.' }),
    url: Type.String({ description: "The public address, on the service's own origin." }),
    published_url: Type.String({ description: "The same public address, under the session object's name for it." }),
    port: Type.Integer({ description: 'The workspace port served.' }),
  },
  { $id: 'Preview', additionalProperties: false },
)
export type Preview = Static<typeof Preview>

export const PreviewDeleted = Type.Object(
  { object: Type.Literal('preview.deleted'), id: Type.String({ description: "The session's id: a session has at most one preview." }), deleted: Type.Boolean() },
  { $id: 'PreviewDeleted', additionalProperties: false },
)
