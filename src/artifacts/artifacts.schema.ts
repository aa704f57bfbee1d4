import { Type } from 'typebox'
import { OrderedListQuery } from '../http/pagination.ts'

export const Artifact = Type.Object(
  {
    object: Type.Literal('artifact'),
    id: Type.String(),
    session_id: Type.String(),
    turn_id: Type.String({ description: 'The turn that published it.' }),
    path: Type.String({ description: 'Where it was in the workspace, relative to it.' }),
    size_bytes: Type.Integer(),
    sha256: Type.String({ description: 'Lowercase hex digest of the bytes.' }),
    content_type: Type.String({ description: 'From the file name; application/octet-stream when unknown.' }),
    created_at: Type.Integer(),
  },
  { $id: 'Artifact', additionalProperties: false },
)

export const ListArtifactsQuery = Type.Object({ ...OrderedListQuery, turn_id: Type.Optional(Type.String({ description: "Only that turn's artifacts." })) }, { additionalProperties: false })
export const ArchiveQuery = Type.Object(
  { turn_id: Type.Optional(Type.String({ description: "Only that turn's files, named as in the workspace; without it every artifact, each under its turn's id." })) },
  { additionalProperties: false },
)
export const ArtifactParams = Type.Object({ session_id: Type.String(), artifact_id: Type.String() }, { additionalProperties: false })
