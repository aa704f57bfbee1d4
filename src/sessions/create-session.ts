import type { Deps } from '../deps.ts'
import { lockKey } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { withEvents } from '../events/record-event.ts'
import { decodeFiles, type DecodedFile } from '../files/decode-files.ts'
import { listSeedFiles, putSeedFiles } from '../files/seed-files.store.ts'
import { getTemplateByName, resolveProfiles } from '../environments/environments.store.ts'
import { newId } from '../shared/ids.ts'
import { checkImageRef } from '../shared/image-ref.ts'
import { nodeIsLive } from '../nodes/nodes.store.ts'
import type { Auth } from '../http/context.ts'
import { resolveAgent } from './resolve-agent.ts'
import type { CreateSessionBody, Session } from './sessions.schema.ts'
import { countLiveSessions, insertSession, type SessionRow, type StoredEnvironment } from './sessions.store.ts'
import { insertTurn } from '../turns/turns.store.ts'

export const WORKSPACE_DIRECTORY = '/workspace'

/**
 * Creates a session all or nothing: everything is checked before the one transaction that counts
 * the organization's sessions, writes the session, its seed files, `session.created` and the turn
 * of its opening `input`. A refused create leaves nothing behind.
 */
export async function createSession(deps: Pick<Deps, 'store' | 'bus' | 'config' | 'box' | 'node'>, auth: Auth, body: CreateSessionBody, source: Session['source']): Promise<SessionRow> {
  const { store, bus, config, box } = deps
  const db = store.db
  const env = body.environment ?? {}
  const agent = await resolveAgent(db, box, auth.orgId, body.agent, body.tools)

  const template = env.template !== undefined ? await getTemplateByName(db, auth.orgId, env.template) : null
  if (env.template !== undefined && !template) throw new ApiError('invalid_request', `No environment template named "${env.template}" (environment.template).`)
  const ownFiles = decodeFiles(env.files ?? [], 'environment.files')
  const profiles = await resolveProfiles(db, auth.orgId, [...new Set([...(template?.profiles ?? []), ...(env.profiles ?? [])])])

  // The session's own files win over the template's at the same path.
  const templateFiles = template ? await listSeedFiles(db, template.id) : []
  const byPath = new Map<string, DecodedFile>()
  for (const f of [...templateFiles, ...ownFiles]) byPath.set(f.path, f)
  const files = [...byPath.values()]

  const repo = env.repo ?? template?.repo ?? null
  // The session's own image wins over its template's, which wins over the deployment's default
  // (checked at start); none anywhere: the host's system, as before images.
  const image = env.image !== undefined ? checkImageRef(env.image, 'environment.image') : (template?.image ?? config.defaultImage ?? null)
  const environment: StoredEnvironment = {
    type: 'sandbox',
    state: 'pending',
    workspace_directory: WORKSPACE_DIRECTORY,
    repo: repo ? { full_name: repo.full_name, branch: repo.branch ?? null, clone_error: null } : null,
    profiles: profiles.map((p) => p.id),
    template: template?.name ?? null,
    image: image === null ? null : { ref: image, digest: null },
    template_id: template?.id ?? null,
    setup: template?.setup ?? null,
    files: files.map((f) => ({ path: f.path, size_bytes: f.content.length, mode: f.mode })),
  }

  // Its workspace comes up here, so this node holds its lease from the start: under an identity
  // it is sure of, checked again below in the transaction that names it.
  const owner = await deps.node.creator()
  return withEvents(store, bus, async (trx, record) => {
    if (!(await nodeIsLive(trx, store.dialect, owner, config.nodeLeaseMs))) {
      throw new ApiError('sandbox_unavailable', 'This node lost its place in the service a moment ago and is joining again; retry shortly.')
    }
    // Serializes creates of one organization so that two racing requests cannot both take the last slot.
    await lockKey(trx, store.dialect, `sessions:${auth.orgId}`)
    const live = await countLiveSessions(trx, auth.orgId)
    if (live >= config.maxSessionsPerOrg) {
      throw new ApiError(
        'project_limit_exceeded',
        `This organization already holds ${live} sessions, its ceiling of ${config.maxSessionsPerOrg}. Retrying will not succeed: delete a session to free a slot.`,
      )
    }
    const row = await insertSession(trx, {
      id: newId('ses'),
      orgId: auth.orgId,
      title: body.title ?? '',
      source,
      createdByToken: auth.tokenId,
      metadata: body.metadata ?? {},
      agent,
      environment,
      input: body.input ?? null,
      ownerNode: owner,
      now: Date.now(),
    })
    await putSeedFiles(trx, row.id, files)
    await record({ orgId: auth.orgId, sessionId: row.id, type: 'session.created', payload: { session_id: row.id } })
    // The opening message is the session's first turn, in the same transaction: all or nothing.
    if (body.input !== undefined) await insertTurn(trx, { id: newId('trn'), sessionId: row.id, orgId: auth.orgId, text: body.input, queuedPosition: null, now: row.created_at })
    return row
  })
}
