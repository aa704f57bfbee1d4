import { Type } from 'typebox'
import { FileInputs } from '../files/files.schema.ts'

export const UploadFilesBody = Type.Object({ files: FileInputs }, { $id: 'UploadFilesRequest', additionalProperties: false })

export const UploadedFile = Type.Object(
  { path: Type.String({ description: 'Relative to the workspace.' }), size_bytes: Type.Integer() },
  { additionalProperties: false },
)

export const UploadedFiles = Type.Object(
  { object: Type.Literal('list'), data: Type.Array(UploadedFile), has_more: Type.Boolean(), last_id: Type.String({ description: 'The last path written.' }) },
  { $id: 'UploadedFiles', additionalProperties: false },
)
