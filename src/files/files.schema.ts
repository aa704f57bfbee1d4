import { Type, type Static } from 'typebox'

export const FILE_LIMITS = { perFileBytes: 5 * 1024 * 1024, perRequestBytes: 10 * 1024 * 1024, filesPerRequest: 50 } as const

export const FileInput = Type.Object(
  {
    path: Type.String({ minLength: 1, maxLength: 1024, description: 'Relative to the workspace; may not leave it.' }),
    content: Type.String({ description: 'Base64; at most 5 MiB decoded.' }),
    mode: Type.Optional(Type.Integer({ minimum: 0, maximum: 0o7777, description: 'Unix permission bits, e.g. 493 (0755). Default 420 (0644).' })),
  },
  { additionalProperties: false },
)
export type FileInput = Static<typeof FileInput>

export const FileInputs = Type.Array(FileInput, { description: 'At most 50 files and 10 MiB decoded per request.' })
