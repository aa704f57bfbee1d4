import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { requireSession } from '../sessions/require-session.ts'
import type { Deps } from '../deps.ts'
import { errorResponses } from '../errors.ts'
import { decodeFiles } from '../files/decode-files.ts'
import { MIB } from '../http/limits.ts'
import { SessionParams } from '../sessions/sessions.schema.ts'
import { UploadFilesBody, UploadedFiles } from './files.schema.ts'
import { uploadFiles } from './upload-files.ts'

export const fileRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, { store, workspaces }) => {
  app.post(
    '/sessions/:session_id/files',
    {
      // Ten MiB of decoded files is about 13.4 MiB of base64.
      bodyLimit: 16 * MIB,
      // Files go into the workspace: on the node that runs it.
      config: { scope: 'sessions:write', idempotent: true, onOwnersNode: true },
      schema: {
        operationId: 'uploadFiles',
        tags: ['sessions'],
        summary: 'Put files into the workspace (resumes a paused one); all or nothing',
        params: SessionParams,
        body: UploadFilesBody,
        response: { 200: UploadedFiles, ...errorResponses(400, 404) },
      },
    },
    async (req) => {
      const session = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      const files = decodeFiles(req.body.files, 'files')
      const sandbox = await workspaces.acquire(session.id)
      const release = workspaces.hold(session.id)
      try {
        await uploadFiles(sandbox, files)
      } finally {
        release()
      }
      const data = files.map((f) => ({ path: f.path, size_bytes: f.content.length }))
      return { object: 'list' as const, data, has_more: false, last_id: data.at(-1)?.path ?? '' }
    },
  )
}
