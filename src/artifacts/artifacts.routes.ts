import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { requireSession } from '../sessions/require-session.ts'
import type { Deps } from '../deps.ts'
import { ApiError, errorResponses, notFound } from '../errors.ts'
import { ListEnvelope, listPage } from '../http/pagination.ts'
import { SessionParams } from '../sessions/sessions.schema.ts'
import { artifactRows, getArtifactRow, sessionArtifacts, toArtifact } from './artifacts.store.ts'
import { tarStream, type TarEntry } from './tar-stream.ts'
import { getTurnRow } from '../turns/turns.store.ts'
import { Artifact, ArchiveQuery, ArtifactParams, ListArtifactsQuery } from './artifacts.schema.ts'

const bytes = (mediaType: string, description: string) => ({ description, content: { [mediaType]: { schema: { type: 'string', format: 'binary' } } } })

export const artifactRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { store, blobs }) => {
  app.get(
    '/sessions/:session_id/artifacts',
    {
      config: { scope: 'sessions:read', onOwnersNode: false },
      schema: {
        operationId: 'listArtifacts',
        tags: ['artifacts'],
        summary: 'Files the turns of a session published',
        params: SessionParams,
        querystring: ListArtifactsQuery,
        response: { 200: ListEnvelope(Artifact), ...errorResponses(400, 404) },
      },
    },
    async (req) => {
      const session = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      return listPage(artifactRows(store.db, session.id, req.query.turn_id), req.query, (rows) => rows.map(toArtifact))
    },
  )

  app.get(
    '/sessions/:session_id/artifacts/archive',
    {
      config: { scope: 'sessions:read', onOwnersNode: false },
      schema: {
        operationId: 'getArtifactArchive',
        tags: ['artifacts'],
        summary: "The session's artifacts (or one turn's) as a POSIX tar, streamed",
        params: SessionParams,
        querystring: ArchiveQuery,
        response: { 200: bytes('application/x-tar', "With turn_id, that turn's files named as in the workspace; without, every artifact under {turn_id}/. An artifact whose stored copy is gone is omitted."), ...errorResponses(400, 404) },
      },
    },
    async (req, reply) => {
      const session = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      const turnId = req.query.turn_id
      if (turnId !== undefined && !(await getTurnRow(store.db, session.id, turnId))) throw notFound('turn', turnId)
      const rows = await sessionArtifacts(store.db, session.id, turnId)
      async function* entries(): AsyncIterable<TarEntry> {
        for (const row of rows) {
          // Opened before its header is written: a copy that is gone is left out, not a cut archive.
          const bytes = await blobs.open(row.blob_key)
          if (!bytes) continue
          yield { name: turnId !== undefined ? row.path : `${row.turn_id}/${row.path}`, size: Number(row.size_bytes), mtimeMs: Number(row.created_at), open: () => bytes }
        }
      }
      const name = turnId ?? session.id
      return reply.header('content-type', 'application/x-tar').header('content-disposition', `attachment; filename="${name}.tar"`).send(tarStream(entries()))
    },
  )

  app.get(
    '/sessions/:session_id/artifacts/:artifact_id/content',
    {
      config: { scope: 'sessions:read', onOwnersNode: false },
      schema: {
        operationId: 'getArtifactContent',
        tags: ['artifacts'],
        summary: "One artifact's bytes, streamed",
        params: ArtifactParams,
        response: { 200: bytes('application/octet-stream', 'The bytes as published.'), ...errorResponses(400, 404) },
      },
    },
    async (req, reply) => {
      const session = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      const row = await getArtifactRow(store.db, session.id, req.params.artifact_id)
      if (!row) throw notFound('artifact', req.params.artifact_id)
      const stream = await blobs.open(row.blob_key)
      if (!stream) throw new ApiError('not_found', `The stored copy of artifact "${row.id}" is gone.`)
      return reply
        .header('content-type', 'application/octet-stream')
        .header('content-length', String(row.size_bytes))
        .header('x-artifact-sha256', row.sha256)
        .send(stream)
    },
  )
}
