import type { Db } from '../db/database.ts'
import { loadConversation } from '../turns/conversation.store.ts'
import type { TurnRow } from '../turns/turns.store.ts'

/**
 * What the model of a working turn is told when its workspace came back on another node (`how`:
 * restored from the last snapshot, or rebuilt). The note is delivered at the turn's next step,
 * after the calls the new node ran meanwhile (a call made but not yet run when the node was lost
 * runs in the restored workspace), so it names the calls whose effects are gone: those answered
 * before the restore and the one cut by it. A snapshot is stored before every turn settles, so
 * earlier turns' changes are in it.
 */
export async function takenOverNote(db: Db, turn: TurnRow | undefined, how: string): Promise<string> {
  const head = `The node that ran this workspace stopped, and another node took it over: the workspace was ${how}.`
  if (!turn || turn.started_at === null) return `${head} Changes made after that are gone; check the files before relying on them.`
  const gone: string[] = []
  for (const entry of await loadConversation(db, turn.session_id)) {
    if (entry.turnId !== turn.id || entry.message.role !== 'tool') continue
    for (const part of entry.message.content) if (part.type === 'tool-result' && !gone.includes(part.toolCallId)) gone.push(part.toolCallId)
  }
  if (turn.running_call !== null && !gone.includes(turn.running_call)) gone.push(turn.running_call)
  if (gone.length === 0) return `${head} No tool call of this turn had run before it: every call of this turn ran in the restored workspace.`
  return `${head} What this turn's tool calls ${gone.join(', ')} changed is gone; every later call of this turn ran in the restored workspace. Check the files before relying on them.`
}
