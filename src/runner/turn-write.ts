import type { Deps } from '../deps.ts'
import type { Db } from '../db/database.ts'
import { withEvents, type Recorder } from '../events/record-event.ts'
import { checkFence, type Fence } from '../nodes/ownership.store.ts'

/**
 * What a turn's writes need: the store and the bus, and the fence of the driver making them (none
 * outside a driver: a waiting turn cancelled by a request).
 */
export type TurnCtx = Pick<Deps, 'store' | 'bus'> & {
  fence?: Fence
  /** Whether the node holds its leases now (true), or must renew first (see ServiceNode.holdsLeases). */
  leaseHeld?: () => true | Promise<boolean>
}

/**
 * One write of a turn (its start, a step, a call's result, its end) with its events, in one
 * transaction that first checks the driver still holds the session in the epoch it started
 * under: a node that lost the lease meanwhile (paused past it, then woken with an answer in hand)
 * is refused with LostOwnership and writes nothing. A timer in the node could not promise that.
 */
export function turnWrite<T>(ctx: TurnCtx, work: (trx: Db, record: Recorder) => Promise<T>): Promise<T> {
  return withEvents(ctx.store, ctx.bus, async (trx, record) => {
    if (ctx.fence) await checkFence(trx, ctx.store.dialect, ctx.fence, true)
    return work(trx, record)
  })
}
