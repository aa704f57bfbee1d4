import type { Deps } from '../deps.ts'
import { requireSession } from '../sessions/require-session.ts'
import { lockKey } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { withEvents } from '../events/record-event.ts'
import { decodeFiles } from '../files/decode-files.ts'
import type { Auth } from '../http/context.ts'
import { newId } from '../shared/ids.ts'
import { uploadFiles } from '../workspaces/upload-files.ts'
import { insertSteer } from './steers.store.ts'
import type { SendMessageBody } from './turns.schema.ts'
import { insertTurn, workingTurns, type TurnRow } from './turns.store.ts'

export const MAX_WAITING = 5

/**
 * Accepts a message: a new turn that starts at once on a quiet session, or waits behind the
 * running one (at most five wait), or, with `steer`, text delivered into the running turn at its
 * next step. Files go into the workspace before the message is accepted, so the agent finds them.
 */
export async function sendMessage(deps: Pick<Deps, 'store' | 'bus' | 'workspaces'>, auth: Auth, sessionId: string, body: SendMessageBody): Promise<TurnRow> {
  const { store, bus, workspaces } = deps
  const files = decodeFiles(body.files ?? [], 'files')
  const check = async (db = store.db) => {
    const session = await requireSession(db, auth.orgId, sessionId)
    const working = await workingTurns(db, sessionId)
    // The first working turn runs (or is about to); the others wait behind it.
    const waiting = Math.max(0, working.length - 1)
    if (working.length > 0 && !body.steer && waiting >= MAX_WAITING) {
      throw new ApiError('queue_full', `This session already has ${MAX_WAITING} messages waiting behind its running turn. Wait for one to start, cancel one, or steer the running turn with "steer": true.`)
    }
    return { session, working, waiting }
  }
  await check()
  if (files.length) {
    const sandbox = await workspaces.acquire(sessionId)
    const release = workspaces.hold(sessionId)
    try {
      await uploadFiles(sandbox, files)
    } finally {
      release()
    }
  }
  return withEvents(store, bus, async (trx, record) => {
    // Serializes the messages of one session, so that two cannot both take the last queue place.
    await lockKey(trx, store.dialect, `turns:${sessionId}`)
    const { working, waiting } = await check(trx)
    const now = Date.now()
    const base = { orgId: auth.orgId, sessionId }
    const running = working[0]
    if (running && body.steer) {
      await insertSteer(trx, { sessionId, turnId: running.id, text: body.text, now })
      await record({ ...base, turnId: running.id, type: 'user.message', payload: { text: body.text } })
      return running
    }
    const position = running ? waiting + 1 : null
    const turn = await insertTurn(trx, { id: newId('trn'), sessionId, orgId: auth.orgId, text: body.text, queuedPosition: position, now })
    if (position !== null) await record({ ...base, turnId: turn.id, type: 'message.queued', payload: { text: body.text, position } })
    return turn
  })
}
