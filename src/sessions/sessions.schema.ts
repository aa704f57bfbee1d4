import { Type, type Static } from 'typebox'
import { FileInputs } from '../files/files.schema.ts'
import { ToolEntries, ToolEntryOut } from '../tools/tools.schema.ts'

export const SessionStatus = Type.Union(
  [Type.Literal('idle'), Type.Literal('working'), Type.Literal('requires_action'), Type.Literal('failed')],
  { description: 'failed is the outcome of the last turn, not a dead session: it accepts input.' },
)
export type SessionStatus = Static<typeof SessionStatus>

export const ApprovalMode = Type.Union([Type.Literal('auto'), Type.Literal('ask'), Type.Literal('read_only')], {
  description: 'auto (default): tools run unless a rule says otherwise; ask: every writing tool asks first; read_only: writing tools are refused.',
})

const Glob = Type.String({ maxLength: 500, description: 'Glob pattern (* and **), at most 500 characters.' })
export const PermissionRule = Type.Object(
  {
    decision: Type.Union([Type.Literal('allow'), Type.Literal('deny'), Type.Literal('ask')]),
    tool: Type.Optional(Glob),
    path: Type.Optional(Glob),
    command: Type.Optional(Glob),
    domain: Type.Optional(Glob),
  },
  { additionalProperties: false, description: 'Matches when all its given fields match; deny beats ask beats allow.' },
)
export type PermissionRule = Static<typeof PermissionRule>
export const PermissionRules = Type.Array(PermissionRule, { maxItems: 50 })

// PostgreSQL cannot hold NUL (U+0000) in text, so neither a label nor a filter may carry it.
const NO_NUL = '^[^\\u0000]*$'
export const Metadata = Type.Record(Type.String(), Type.String({ maxLength: 512, pattern: NO_NUL, 'x-must-be': 'at most 512 characters, with no NUL (U+0000)' }), {
  $id: 'Metadata',
  maxProperties: 16,
  propertyNames: { minLength: 1, maxLength: 64, pattern: NO_NUL, 'x-must-be': '1 to 64 characters, with no NUL (U+0000)' },
  description: "The caller's own labels: at most 16 keys of at most 64 characters, string values of at most 512, no NUL (U+0000) in either. Returned unchanged; an update replaces them as a whole.",
})

export const AgentInput = Type.Object(
  {
    id: Type.Optional(Type.String({ description: 'A stored agent to start from; the other fields override it.' })),
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    model_credential_id: Type.Optional(Type.String()),
    approval_mode: Type.Optional(ApprovalMode),
    instructions: Type.Optional(Type.String({ maxLength: 100_000 })),
    permission_rules: Type.Optional(PermissionRules),
    tools: Type.Optional(ToolEntries),
  },
  { additionalProperties: false },
)
export type AgentInput = Static<typeof AgentInput>

export const RepoInput = Type.Object(
  {
    full_name: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9-]*/(?!\\.\\.?$)[A-Za-z0-9_.-]+$', description: 'owner/name, cloned from {WARREN_GIT_BASE_URL}/{full_name}.git' }),
    branch: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
  },
  { additionalProperties: false },
)

/** An OCI image reference as a caller writes one, `what` saying what it is for; its syntax is checked by images/image-reference.ts (400 naming what is wrong). */
export const ImageRef = (what: string) =>
  Type.String({
    minLength: 1,
    maxLength: 512,
    description: `An OCI image reference, \`[host[:port]/]name[:tag]\` or \`…@sha256:<digest>\` (no tag and no digest: \`latest\`; no registry: Docker Hub). ${what}`,
  })

export const EnvironmentInput = Type.Object(
  {
    files: Type.Optional(FileInputs),
    repo: Type.Optional(RepoInput),
    profiles: Type.Optional(Type.Array(Type.String(), { maxItems: 25, description: 'Environment profile ids or names.' })),
    template: Type.Optional(Type.String({ description: 'Name of an environment template to start from.' })),
    image: Type.Optional(
      ImageRef("The workspace's root: its layers the read-only base, the session's own writable layer over them. Wins over the template's image and the deployment's default (WARREN_DEFAULT_IMAGE); none anywhere: the host's system."),
    ),
  },
  { additionalProperties: false },
)

/** Headers a creation reads besides the token (written as the specification spells them). */
export const CreateSessionHeaders = Type.Object({
  'X-Warren-Source': Type.Optional(
    Type.String({ description: "Where the request comes from: `cli` or `console` become the session's `source`; any other value, or none, makes it `api`." }),
  ),
})

export const CreateSessionBody = Type.Object(
  {
    agent: Type.Optional(AgentInput),
    input: Type.Optional(Type.String({ minLength: 1, maxLength: 1_000_000, description: 'Opening message. All or nothing.' })),
    environment: Type.Optional(EnvironmentInput),
    metadata: Type.Optional(Metadata),
    title: Type.Optional(Type.String({ maxLength: 1000 })),
    tools: Type.Optional(ToolEntries),
  },
  { $id: 'CreateSessionRequest', additionalProperties: false },
)
export type CreateSessionBody = Static<typeof CreateSessionBody>

export const UpdateSessionBody = Type.Object(
  {
    title: Type.Optional(Type.String({ maxLength: 1000 })),
    metadata: Type.Optional(Metadata),
  },
  { $id: 'UpdateSessionRequest', additionalProperties: false },
)

export const SessionAgent = Type.Object(
  {
    id: Type.String({ description: 'The stored agent the session started from, or an id of its own.' }),
    model: Type.String(),
    model_credential_id: Type.Union([Type.String(), Type.Null()], { description: 'Null when the connection was deleted and none remained.' }),
    approval_mode: ApprovalMode,
    instructions: Type.String(),
    permission_rules: Type.Array(PermissionRule),
    tools: Type.Array(ToolEntryOut),
  },
  { $id: 'SessionAgent', additionalProperties: false },
)
export type SessionAgent = Static<typeof SessionAgent>

export const SessionImage = Type.Object(
  {
    ref: Type.String({ description: 'The reference as named (by the session, its template or the deployment default).' }),
    digest: Type.Union([Type.String(), Type.Null()], {
      description: 'The manifest digest (`sha256:…`) it resolved to when the workspace first came up; null until then. Every later start (a restore, a takeover by another node) runs this very digest, whatever the tag names by then.',
    }),
  },
  { $id: 'SessionImage', additionalProperties: false },
)
export type SessionImage = Static<typeof SessionImage>

export const SessionEnvironment = Type.Object(
  {
    type: Type.Literal('sandbox'),
    state: Type.String({ description: 'Workspace state: pending (owed, not up yet), running, paused, reclaimed, failed, deleted.' }),
    workspace_directory: Type.String(),
    repo: Type.Union([
      Type.Object(
        {
          full_name: Type.String(),
          branch: Type.Union([Type.String(), Type.Null()], { description: 'Null until known when none was asked for.' }),
          clone_error: Type.Union([Type.String(), Type.Null()], { description: 'Why the clone failed; null while owed or done.' }),
        },
        { additionalProperties: false },
      ),
      Type.Null(),
    ]),
    profiles: Type.Array(Type.String(), { description: 'Ids of the environment profiles applied.' }),
    template: Type.Union([Type.String(), Type.Null()], { description: 'Name of the template it started from.' }),
    image: Type.Union([SessionImage, Type.Null()], { description: "The image the workspace runs on; null: the host's system." }),
  },
  { $id: 'SessionEnvironment', additionalProperties: false },
)
export type SessionEnvironment = Static<typeof SessionEnvironment>

export const SessionPreview = Type.Object(
  {
    url: Type.Union([Type.String(), Type.Null()], { description: 'Address that requires an access token; null when no preview is published.' }),
    published_url: Type.Union([Type.String(), Type.Null()], { description: 'The public address; null when none.' }),
    port: Type.Union([Type.Integer(), Type.Null()]),
  },
  { $id: 'SessionPreview', additionalProperties: false },
)
export type SessionPreview = Static<typeof SessionPreview>

export const RequiredAction = Type.Object(
  {
    type: Type.Literal('function_call'),
    turn_id: Type.String(),
    call_id: Type.String(),
    name: Type.String(),
    arguments: Type.Unknown(),
    created_at: Type.Integer(),
    expires_at: Type.Integer({
      description:
        "Not a deadline: a required action never times out and a late answer is accepted. It is the latest moment the workspace's current run can last (its lifetime ceiling); after it the workspace is restored from its files on the answer, and processes the turn started are gone.",
    }),
  },
  { $id: 'RequiredAction', additionalProperties: false },
)
export type RequiredAction = Static<typeof RequiredAction>

export const Session = Type.Object(
  {
    object: Type.Literal('session'),
    id: Type.String(),
    status: SessionStatus,
    created_at: Type.Integer({ description: 'Unix ms' }),
    updated_at: Type.Integer({ description: 'Unix ms; moves on any change' }),
    agent: SessionAgent,
    environment: SessionEnvironment,
    preview: SessionPreview,
    title: Type.String(),
    source: Type.Union([Type.Literal('api'), Type.Literal('console'), Type.Literal('cli'), Type.Null()]),
    created_by_token: Type.String({ description: 'Id of the token that created the session; never the secret.' }),
    required_actions: Type.Array(RequiredAction, { description: 'Everything the session waits on the caller for. Authoritative.' }),
    metadata: Type.Record(Type.String(), Type.String()),
  },
  { additionalProperties: false, $id: 'Session' },
)
export type Session = Static<typeof Session>

export const ListSessionsQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
    order: Type.Optional(Type.Union([Type.Literal('asc'), Type.Literal('desc')], { default: 'desc' })),
    after: Type.Optional(Type.String()),
    status: Type.Optional(SessionStatus),
    source: Type.Optional(Type.Union([Type.Literal('api'), Type.Literal('console'), Type.Literal('cli')])),
    created_by: Type.Optional(Type.Literal('me', { description: 'Only sessions created by the calling token.' })),
    metadata: Type.Optional(
      Type.Array(Type.String({
        pattern: '^[^:\\u0000]{1,64}:[^\\u0000]{0,512}$',
        description: 'key:value',
        'x-must-be': 'key:value, the key (up to the first colon) 1 to 64 characters and the value at most 512, with no NUL (U+0000) in either',
      }), {
        description: 'Repeatable key:value; all must match.',
      }),
    ),
  },
  { additionalProperties: false },
)

export const SessionDeleted = Type.Object(
  { object: Type.Literal('session.deleted'), id: Type.String(), deleted: Type.Boolean() },
  { $id: 'SessionDeleted', additionalProperties: false },
)

export const SessionParams = Type.Object({ session_id: Type.String() }, { additionalProperties: false })
