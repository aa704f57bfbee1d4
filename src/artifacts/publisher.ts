import { turnsToPublish } from './artifacts.store.ts'
import { publishTurn, type PublishDeps } from './publish-turn.ts'

export type ArtifactPublisher = { start(): void; close(): Promise<void> }

/**
 * Publishes the files of settled turns, one turn at a time, in the order they settled. The work
 * is a row (`artifacts = 'pending'`, set in the transaction that settles the turn), so a restart
 * takes up what was left, and `turn.ended` wakes the publisher for the session that just settled.
 */
export function artifactPublisher(deps: PublishDeps & { log?: (line: string) => void }): ArtifactPublisher {
  const log = deps.log ?? ((line: string) => process.stderr.write(`warren: artifacts: ${line}\n`))
  let chain: Promise<void> = Promise.resolve()
  let closed = false
  let unsubscribe: (() => void) | null = null
  const run = (sessionId?: string) => {
    chain = chain.then(async () => {
      if (closed) return
      for (const turn of await turnsToPublish(deps.store.db, sessionId)) {
        if (closed) return
        await publishTurn(deps, turn).catch((err: unknown) => log(`publishing turn ${turn.id} failed, left pending: ${(err as Error).message}`))
      }
    }).catch((err: unknown) => log(`looking for turns to publish failed: ${(err as Error).message}`))
  }
  return {
    start() {
      unsubscribe = deps.bus.subscribe((n) => {
        if (n.type === 'turn.ended' && n.sessionId) run(n.sessionId)
      })
      run()
    },
    async close() {
      closed = true
      unsubscribe?.()
      await chain
    },
  }
}
