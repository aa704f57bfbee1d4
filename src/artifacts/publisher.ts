import { turnsToPublish } from './artifacts.store.ts'
import { publishTurn, type PublishDeps } from './publish-turn.ts'

/**
 * At service start: publishes the turns whose publication a stop interrupted (their `artifacts`
 * is still `pending`), oldest first. Run it before the runner recovers, so that no queued turn
 * changes a workspace before the turn before it has been published. While the service runs, the
 * runner publishes each turn itself, right after settling it.
 */
export async function publishPending(deps: PublishDeps): Promise<void> {
  for (const turn of await turnsToPublish(deps.store.db)) await publishTurn(deps, turn)
}
