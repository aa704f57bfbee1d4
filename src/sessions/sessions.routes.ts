import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { requireSession } from './require-session.ts'
import type { Deps } from '../deps.ts'
import { errorResponses } from '../errors.ts'
import { ListEnvelope, emptyList, toList } from '../http/pagination.ts'
import { MIB } from '../http/limits.ts'
import { keptBodySender } from '../http/kept-body.ts'
import { defaultToolEntries } from '../tools/default-tools.ts'
import { createSession } from './create-session.ts'
import { deleteSession } from './delete-session.ts'
import { sessionReader } from './read-session.ts'
import { CreateSessionBody, CreateSessionHeaders, ListSessionsQuery, Session, SessionDeleted, SessionParams, UpdateSessionBody } from './sessions.schema.ts'
import { getSessionRow, listSessionRows, toSessions, updateSessionRow, type SessionRow } from './sessions.store.ts'

const sourceOf = (header: unknown): Session['source'] => (header === 'cli' ? 'cli' : header === 'console' ? 'console' : 'api')

export const sessionRoutes: FastifyPluginAsyncTypebox<Deps> = async (app, deps) => {
  const { store, config, workspaces, runner } = deps
  const defaults = defaultToolEntries(config)
  const shapeAll = (rows: SessionRow[]) => toSessions(store.db, rows, defaults)
  const shape = async (row: SessionRow) => (await shapeAll([row]))[0]!
  const readSession = sessionReader(store, defaults)
  const sendSession = keptBodySender()

  app.post(
    '/sessions',
    {
      bodyLimit: 16 * MIB,
      config: { scope: 'sessions:write', bucket: 'sessions', idempotent: true },
      schema: {
        operationId: 'createSession',
        tags: ['sessions'],
        summary: 'Create a session; its workspace comes up in the background',
        body: CreateSessionBody,
        headers: CreateSessionHeaders,
        response: { 201: Session, ...errorResponses(400) },
      },
    },
    async (req, reply) => {
      const row = await createSession(deps, req.auth, req.body, sourceOf(req.headers['x-warren-source']))
      // The workspace comes up in the background: the 201 only means it is owed.
      workspaces.start(row.id)
      // An opening `input` is the session's first turn.
      if (req.body.input !== undefined) runner.kick(row.id)
      return reply.code(201).send(await shape(row))
    },
  )

  app.get(
    '/sessions',
    {
      config: { scope: 'sessions:read' },
      schema: { operationId: 'listSessions', summary: "List the organization's sessions, with filters", tags: ['sessions'], querystring: ListSessionsQuery, response: { 200: ListEnvelope(Session), ...errorResponses(400) } },
    },
    async (req) => {
      const q = req.query
      const cursor = q.after ? await getSessionRow(store.db, req.auth.orgId, q.after) : undefined
      if (q.after && !cursor) return emptyList()
      const metadata = (q.metadata ?? []).map((kv): [string, string] => {
        const i = kv.indexOf(':')
        return [kv.slice(0, i), kv.slice(i + 1)]
      })
      const rows = await listSessionRows(store.db, store.dialect, req.auth.orgId, q, {
        status: q.status,
        source: q.source,
        createdByToken: q.created_by === 'me' ? req.auth.tokenId : undefined,
        metadata,
      }, cursor ?? undefined)
      return toList(await shapeAll(rows), q.limit ?? 20)
    },
  )

  app.get(
    '/sessions/:session_id',
    { config: { scope: 'sessions:read', onOwnersNode: false }, schema: { operationId: 'getSession', summary: 'Read one session', tags: ['sessions'], params: SessionParams, response: { 200: Session, ...errorResponses(404) } } },
    // The read clients poll: a session kept in memory is answered within this call, with text
    // serialized once for as long as it is kept; only a store read waits.
    (req, reply) => {
      const kept = readSession.kept(req.auth.orgId, req.params.session_id, req.readMark)
      if (kept === undefined) return readSession(req.auth.orgId, req.params.session_id, req.readMark).then((session) => sendSession(reply, session))
      sendSession(reply, kept)
    },
  )

  app.post(
    '/sessions/:session_id',
    {
      config: { scope: 'sessions:write', onOwnersNode: false, idempotent: true },
      schema: { operationId: 'updateSession', tags: ['sessions'], summary: 'Update the title or replace the metadata', params: SessionParams, body: UpdateSessionBody, response: { 200: Session, ...errorResponses(400, 404) } },
    },
    async (req) => {
      const row = await requireSession(store.db, req.auth.orgId, req.params.session_id)
      await updateSessionRow(store.db, row.id, req.body, Date.now())
      return shape((await getSessionRow(store.db, req.auth.orgId, row.id))!)
    },
  )

  app.delete(
    '/sessions/:session_id',
    {
      config: { scope: 'sessions:write', onOwnersNode: false, idempotent: true },
      schema: { operationId: 'deleteSession', tags: ['sessions'], summary: 'Delete the session and its workspace; frees its slot at once', params: SessionParams, response: { 200: SessionDeleted, ...errorResponses(404) } },
    },
    async (req) => {
      const id = req.params.session_id
      await deleteSession({ ...deps, log: req.log }, req.auth.orgId, id)
      return { object: 'session.deleted' as const, id, deleted: true }
    },
  )
}
