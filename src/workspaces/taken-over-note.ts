import type { Db, Store } from '../db/database.ts'
import type { EventBus } from '../events/event-bus.ts'
import { withEvents } from '../events/record-event.ts'
import { toolResultsOfTurn } from '../turns/conversation.store.ts'
import { insertSteer } from '../turns/steers.store.ts'
import { workingTurns } from '../turns/turns.store.ts'
import type { TurnRow } from '../turns/turns.store.ts'

/**
 * What the model of a working turn is told when its workspace came back on another node: `how` it
 * came back, and `since`, when the state it came back to was taken (the snapshot's time; null for
 * a workspace rebuilt from its creation state). The note is delivered at the turn's next step,
 * after the calls the new node ran meanwhile (a call made but not run when the node was lost runs
 * in the workspace as it came back), so it names the calls whose effects are gone: those answered
 * after that state was taken, and the one cut by the loss. `lost`: the turn lost something the
 * model must hear of; when not, the note is for people only (a snapshot is stored before every
 * turn settles and at a graceful stop, so a turn's earlier calls are usually in it).
 */
export async function takenOverNote(db: Db, turn: TurnRow | undefined, how: string, since: number | null): Promise<{ text: string; lost: boolean }> {
  const head = `The node that ran this workspace stopped, and another node took it over: the workspace was ${how}.`
  if (!turn || turn.started_at === null) return { text: `${head} Changes made after that are gone; check the files before relying on them.`, lost: false }
  const gone: string[] = []
  for (const { message, createdAt } of await toolResultsOfTurn(db, turn.session_id, turn.id)) {
    if (since !== null && createdAt <= since) continue
    if (message.role !== 'tool') continue
    for (const part of message.content) if (part.type === 'tool-result' && !gone.includes(part.toolCallId)) gone.push(part.toolCallId)
  }
  if (turn.running_call !== null && !gone.includes(turn.running_call)) gone.push(turn.running_call)
  if (gone.length === 0) return { text: `${head} No tool call of this turn ran after that: the workspace holds what every call of this turn did.`, lost: false }
  return { text: `${head} What this turn's tool calls ${gone.join(', ')} changed is gone; every later call of this turn ran in the workspace as it came back. Check the files before relying on them.`, lost: true }
}

/**
 * Says so when a workspace came back from a snapshot or was rebuilt (`how`): on the session's
 * events, and to the model of a turn that was working (at its next step), since what it did
 * after that state is gone.
 */
export async function tellTakenOver(store: Store, bus: EventBus, id: string, orgId: string, how: string, since: number | null): Promise<void> {
  await withEvents(store, bus, async (trx, record) => {
    const [turn] = await workingTurns(trx, id)
    const { text, lost } = await takenOverNote(trx, turn, how, since)
    await record({ orgId, sessionId: id, type: 'session.error', payload: { message: text } })
    if (turn && lost) await insertSteer(trx, { sessionId: id, turnId: turn.id, text: `[Warren] ${text}`, now: Date.now() })
  })
}
