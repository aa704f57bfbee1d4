import type { Deps } from '../deps.ts'
import { ApiError } from '../errors.ts'
import { withEvents } from '../events/record-event.ts'
import { requireSession } from '../sessions/require-session.ts'
import { NO_PREVIEW } from '../sessions/sessions.store.ts'
import { listeningPorts } from './listening-ports.ts'
import { derivedSubdomain, publishedUrl, tokenUrl } from './preview-address.ts'
import type { Preview, PublishPreviewBody } from './previews.schema.ts'
import { previewBySubdomain, previewNameHold, putPreview, setSessionPreview, withdrawPreview } from './previews.store.ts'

/**
 * Publishes the session's preview (replacing the one it had): the port named, or the lowest one
 * served in the workspace; the subdomain asked for, or the session's own. Emits `preview.ready`.
 */
export async function publishPreview(deps: Pick<Deps, 'store' | 'bus' | 'config' | 'workspaces'>, orgId: string, sessionId: string, body: PublishPreviewBody): Promise<Preview> {
  const { store, bus, config, workspaces } = deps
  const session = await requireSession(store.db, orgId, sessionId)
  let port = body.port
  if (port === undefined) {
    const ports = await listeningPorts(await workspaces.acquire(session.id))
    if (ports.length === 0) {
      throw new ApiError('conflict', 'Nothing in the workspace is listening on a port: start the server there (on 0.0.0.0 or 127.0.0.1) first, or name the port with "port".')
    }
    port = ports[0]!
  }
  const subdomain = body.subdomain ?? derivedSubdomain(session.id)
  const url = publishedUrl(config, subdomain)
  const now = Date.now()
  await withEvents(store, bus, async (trx, record) => {
    // Checked again inside: the session may have been deleted while the port was looked for.
    await requireSession(trx, orgId, session.id)
    // Event transactions run one at a time, so no other session can take the name between the two.
    const holder = await previewBySubdomain(trx, subdomain)
    if (holder && holder.session_id !== session.id) throw new ApiError('conflict', `The subdomain "${subdomain}" is taken by another session; choose another.`)
    // A name withdrawn lately still leads its organization's links and visitors here: only that
    // organization may take it back before the hold ends.
    const hold = await previewNameHold(trx, subdomain, now)
    if (hold && hold.org_id !== orgId) {
      throw new ApiError('conflict', `The subdomain "${subdomain}" was withdrawn recently and is held for the organization that published it until ${new Date(hold.held_until).toISOString()}; choose another.`)
    }
    await putPreview(trx, { subdomain, session_id: session.id, org_id: orgId, port, created_at: now }, now + config.previewNameHoldMs)
    await setSessionPreview(trx, session.id, { url: tokenUrl(config, session.id), published_url: url, port }, now)
    await record({ orgId, sessionId: session.id, type: 'preview.ready', payload: { port, url } })
  })
  return { object: 'preview', subdomain, url, published_url: url, port }
}

/** Takes the session's preview down; false when it had none. The caller cuts open connections. */
export async function unpublishPreview(deps: Pick<Deps, 'store' | 'config'>, orgId: string, sessionId: string): Promise<boolean> {
  return deps.store.db.transaction().execute(async (trx) => {
    await requireSession(trx, orgId, sessionId)
    const now = Date.now()
    if (!(await withdrawPreview(trx, sessionId, now + deps.config.previewNameHoldMs, now))) return false
    await setSessionPreview(trx, sessionId, NO_PREVIEW, now)
    return true
  })
}
