import type { ModelMessage } from 'ai'
import type { Db } from '../db/database.ts'
import { estimateTokens, loadConversation, type ConversationEntry } from '../turns/conversation.store.ts'

/**
 * A session's conversation as its driver last read it. The store stays the truth: every read
 * asks it for the rows appended since the last one seen, so what this holds is always what was
 * committed, and a driver that stops drops it. What it saves is reading and parsing the whole
 * conversation again on every move of a turn (several times a step, and longer each step).
 * Only this session's driver writes its conversation while it runs: appends show up on the next
 * read; the one rewrite, a compaction, is applied here once it committed (`compacted`).
 */
export class ConversationView {
  private entries: ConversationEntry[] = []
  private loaded = false
  private readonly db: Db
  private readonly sessionId: string

  constructor(db: Db, sessionId: string) {
    this.db = db
    this.sessionId = sessionId
  }

  /** The conversation now: the rows committed since the last read are read and added. */
  async read(): Promise<ConversationEntry[]> {
    if (!this.loaded) {
      this.entries = await loadConversation(this.db, this.sessionId)
      this.loaded = true
      return this.entries
    }
    const last = this.entries.at(-1)?.ordinal ?? 0
    const fresh = await loadConversation(this.db, this.sessionId, last)
    // Ordinals follow one another: a gap means someone else rewrote the conversation, read it whole.
    if (fresh.length > 0 && fresh[0]!.ordinal !== last + 1 && last !== 0) {
      this.loaded = false
      return this.read()
    }
    for (const e of fresh) this.entries.push(e)
    return this.entries
  }

  /** The messages up to `upTo` were replaced by `summary` in the store (compactConversation), committed. */
  compacted(upTo: number, summary: ModelMessage): void {
    const at = this.entries.findIndex((e) => e.ordinal === upTo)
    if (at < 0) {
      this.loaded = false
      return
    }
    this.entries = [{ ...this.entries[at]!, message: summary, tokens: estimateTokens(summary) }, ...this.entries.slice(at + 1)]
  }
}
