import { turnsToPublish } from './artifacts.store.ts'
import { publishTurn, type PublishDeps } from './publish-turn.ts'

/**
 * When a node takes up a session: publishes the turns whose publication a stop interrupted (their
 * `artifacts` is still `pending`), oldest first. Run it before the session's turns are driven
 * again, so that no queued turn changes a workspace before the turn before it has been published.
 * While a node runs, the runner publishes each turn itself, right after settling it.
 */
export async function publishPending(deps: PublishDeps, sessionId: string): Promise<void> {
  for (const turn of await turnsToPublish(deps.store.db, sessionId)) await publishTurn(deps, turn)
}
