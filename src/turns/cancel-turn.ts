import type { Deps } from '../deps.ts'
import { ApiError, notFound } from '../errors.ts'
import { getTurnRow, type TurnRow } from './turns.store.ts'

/** How long a cancel waits for the turn to settle before answering with what it is then. */
const SETTLE_WAIT_MS = 10_000

/**
 * Cancels a working turn and answers once it has settled, so that the caller sees `cancelled`.
 * The wait is bounded: a tool that ignores its kill still lets the request finish, and the turn
 * settles shortly after. A settled turn is a conflict: it never changes again.
 */
export async function cancelTurn(deps: Pick<Deps, 'store' | 'bus' | 'node'>, sessionId: string, turnId: string): Promise<TurnRow> {
  const { store, bus, node } = deps
  const turn = await getTurnRow(store.db, sessionId, turnId)
  if (!turn) throw notFound('turn', turnId)
  if (turn.status !== 'working') throw new ApiError('conflict', `Turn "${turn.id}" has already settled (${turn.status}); a settled turn never changes.`)
  const settled = new Promise<void>((resolve) => {
    const timer = setTimeout(done, SETTLE_WAIT_MS)
    const off = bus.subscribe((n) => {
      if (n.sessionId === sessionId && n.type === 'turn.ended') void getTurnRow(store.db, sessionId, turnId).then((t) => t?.status !== 'working' && done())
    })
    function done() {
      clearTimeout(timer)
      off()
      resolve()
    }
  })
  await node.cancel(sessionId, turnId)
  await settled
  return (await getTurnRow(store.db, sessionId, turnId))!
}
