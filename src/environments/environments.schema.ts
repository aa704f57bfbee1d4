import { Type, type Static } from 'typebox'
import { FileInputs } from '../files/files.schema.ts'
import { OrderedListQuery, PlainListQuery } from '../http/pagination.ts'
import { ImageRef, RepoInput } from '../sessions/sessions.schema.ts'

export const PROFILE_LIMITS = { keys: 100, valueBytes: 32 * 1024 } as const
export const TEMPLATES_PER_ORG = 25
export const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/

const Name = (what: string) => Type.String({ minLength: 1, maxLength: 128, description: `Unique within the organization; ${what}.` })

export const CreateProfileBody = Type.Object(
  {
    name: Name('a session names the profile by it or by id. It may not begin with "envp_", which ids use'),
    env: Type.Record(Type.String(), Type.String(), {
      description: `Variables set in the workspace. Keys match ${ENV_KEY.source}; at most ${PROFILE_LIMITS.keys} keys; string values of at most 32 KiB (UTF-8). Values are write-only: no response ever returns them.`,
    }),
  },
  { $id: 'CreateEnvironmentProfileRequest', additionalProperties: false },
)
export type CreateProfileBody = Static<typeof CreateProfileBody>

export const Profile = Type.Object(
  {
    object: Type.Literal('environment.profile'),
    id: Type.String(),
    name: Type.String(),
    keys: Type.Array(Type.String(), { description: 'The variable names, sorted; the values are never returned.' }),
    created_at: Type.Integer({ description: 'Unix ms' }),
  },
  { $id: 'EnvironmentProfile', additionalProperties: false },
)
export type Profile = Static<typeof Profile>

export const ProfileDeleted = Type.Object(
  { object: Type.Literal('environment.profile.deleted'), id: Type.String(), deleted: Type.Boolean() },
  { $id: 'EnvironmentProfileDeleted', additionalProperties: false, description: 'The profile is gone and is taken out of every template that named it.' },
)

export const ProfileParams = Type.Object({ profile_id: Type.String() }, { additionalProperties: false })
export const ListProfilesQuery = Type.Object(PlainListQuery, { additionalProperties: false })

export const CreateTemplateBody = Type.Object(
  {
    name: Name('posting an existing name replaces that template'),
    files: Type.Optional(FileInputs),
    repo: Type.Optional(RepoInput),
    setup: Type.Optional(Type.String({ maxLength: 65_536, description: 'Shell script run once when the workspace first comes up.' })),
    profiles: Type.Optional(Type.Array(Type.String(), { maxItems: 25, description: 'Environment profile ids or names of the organization; stored as ids.' })),
    image: Type.Optional(ImageRef('Sessions from the template run on it unless they name their own.')),
  },
  {
    $id: 'PutEnvironmentTemplateRequest',
    additionalProperties: false,
    description: `Creates the template (201), or replaces the whole template of that name (200): the id and created_at stay, every other field takes the new value, and a field left out is cleared. At most ${TEMPLATES_PER_ORG} templates per organization.`,
  },
)
export type CreateTemplateBody = Static<typeof CreateTemplateBody>

export const TemplateFile = Type.Object(
  { path: Type.String(), size_bytes: Type.Integer(), mode: Type.Integer({ description: 'Unix permission bits' }) },
  { additionalProperties: false },
)
export type TemplateFile = Static<typeof TemplateFile>

export const TemplateRepo = Type.Object(
  { full_name: Type.String({ description: 'owner/name' }), branch: Type.Optional(Type.String({ description: 'Absent: the default branch.' })) },
  { additionalProperties: false },
)
export type TemplateRepo = Static<typeof TemplateRepo>

export const Template = Type.Object(
  {
    object: Type.Literal('environment.template'),
    id: Type.String(),
    name: Type.String(),
    files: Type.Array(TemplateFile, { description: 'What the workspace is seeded with; the bytes are kept but not returned.' }),
    repo: Type.Union([TemplateRepo, Type.Null()]),
    setup: Type.Union([Type.String(), Type.Null()]),
    profiles: Type.Array(Type.String(), { description: 'Environment profile ids.' }),
    image: Type.Union([Type.String(), Type.Null()], { description: 'The image reference sessions from it run on (unless they name their own); null: none.' }),
    created_at: Type.Integer({ description: 'Unix ms' }),
    updated_at: Type.Integer({ description: 'Unix ms of the last replacement' }),
  },
  { $id: 'EnvironmentTemplate', additionalProperties: false },
)
export type Template = Static<typeof Template>

export const TemplateDeleted = Type.Object(
  { object: Type.Literal('environment.template.deleted'), id: Type.String(), deleted: Type.Boolean() },
  { $id: 'EnvironmentTemplateDeleted', additionalProperties: false, description: 'The template and its files are gone; sessions already started from it keep their copy.' },
)

export const TemplateParams = Type.Object({ template_id: Type.String() }, { additionalProperties: false })
// Templates are not among the collections the specification lists without `order`.
export const ListTemplatesQuery = Type.Object(OrderedListQuery, { additionalProperties: false })
