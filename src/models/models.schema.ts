import { Type, type Static } from 'typebox'

export const PROVIDERS = ['openai', 'anthropic', 'openai_compatible'] as const
export type Provider = (typeof PROVIDERS)[number]

/** Where each provider is reached when no base_url is given; openai_compatible has no such place. */
export const DEFAULT_BASE_URLS: Record<Provider, string | null> = {
  openai: 'https://api.openai.com/v1',
  anthropic: 'https://api.anthropic.com/v1',
  openai_compatible: null,
}

/** What a refused model address is told, after what the address is; the setting that would allow it. */
export const MODEL_REFUSED = 'model servers at loopback, private and link-local addresses are refused unless the deployment lists them in WARREN_MODEL_ALLOW_PRIVATE'

/** Connections an organization may hold; re-connecting an already connected key does not count. */
export const MAX_CREDENTIALS_PER_ORG = 25

export const ProviderName = Type.Union([Type.Literal('openai'), Type.Literal('anthropic'), Type.Literal('openai_compatible')], {
  description: 'openai_compatible: any server speaking OpenAI’s API; it needs base_url.',
})

const ModelName = Type.String({ minLength: 1, maxLength: 200 })

export const ModelCredential = Type.Object(
  {
    object: Type.Literal('model_credential'),
    id: Type.String(),
    provider: ProviderName,
    base_url: Type.String({ description: 'Where the provider is called, without a trailing slash.' }),
    name: Type.String(),
    models: Type.Array(Type.String(), { description: 'The models this connection runs.' }),
    default: Type.Boolean({ description: 'Whether this is the connection a session runs on when it names none.' }),
    key_hint: Type.String({ description: 'The key’s prefix and last four characters; the key itself is never returned.' }),
    created_at: Type.Integer({ description: 'Unix ms' }),
  },
  { $id: 'ModelCredential', additionalProperties: false },
)
export type ModelCredential = Static<typeof ModelCredential>

export const CreateModelCredentialBody = Type.Object(
  {
    provider: ProviderName,
    api_key: Type.String({ minLength: 1, maxLength: 2000, pattern: '^\\S+$', description: 'Write-only: stored encrypted, never returned.' }),
    base_url: Type.Optional(
      Type.String({
        maxLength: 2000,
        pattern: '^https?://',
        description: 'Required for openai_compatible. Defaults: openai https://api.openai.com/v1, anthropic https://api.anthropic.com/v1.',
      }),
    ),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'A label for people; defaults to the provider (or the host of base_url).' })),
    models: Type.Optional(
      Type.Array(ModelName, {
        minItems: 1,
        maxItems: 500,
        uniqueItems: true,
        description: 'The models to run. Without it, the service asks the provider (GET {base_url}/models).',
      }),
    ),
    default: Type.Optional(
      Type.Boolean({ description: 'true makes this the organization’s default connection. The first connection is the default whatever this says.' }),
    ),
  },
  { $id: 'CreateModelCredentialRequest', additionalProperties: false },
)
export type CreateModelCredentialBody = Static<typeof CreateModelCredentialBody>

export const CredentialParams = Type.Object({ credential_id: Type.String() }, { additionalProperties: false })

export const ModelCredentialDeleted = Type.Object(
  {
    object: Type.Literal('model_credential.deleted'),
    id: Type.String(),
    deleted: Type.Boolean(),
    sessions_moved: Type.Integer({ description: 'Sessions that ran on the connection and were moved to another or left with none.' }),
    moved_to: Type.Union([Type.String(), Type.Null()], { description: 'The connection they moved to; null when none was left.' }),
  },
  { $id: 'ModelCredentialDeleted', additionalProperties: false },
)
export type ModelCredentialDeleted = Static<typeof ModelCredentialDeleted>
