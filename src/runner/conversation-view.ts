import type { ModelMessage } from 'ai'
import type { Store } from '../db/database.ts'
import { estimateTokens, loadConversation, type ConversationEntry } from '../turns/conversation.store.ts'

/**
 * A session's conversation as its driver last read it. The store stays the truth: every read
 * asks it for the rows appended since the last one seen, so what this holds is always what was
 * committed, and a driver that stops drops it. What it saves is reading and parsing the whole
 * conversation again on every move of a turn (several times a step, and longer each step).
 * Only this session's driver writes its conversation while it runs: appends show up on the next
 * read; the one rewrite, a compaction, is applied here once it committed (`compacted`). Where the
 * store has a write mark (SQLite), a read with nothing written to the database since the last
 * one (by anyone) answers from memory: a step reads twice with no write between.
 */
export class ConversationView {
  private entries: ConversationEntry[] = []
  private loaded = false
  /** The store's write mark when the entries were last read (undefined: none, or no marks). */
  private mark: string | undefined
  private readonly store: Pick<Store, 'db' | 'writeMark'>
  private readonly sessionId: string

  constructor(store: Pick<Store, 'db' | 'writeMark'>, sessionId: string) {
    this.store = store
    this.sessionId = sessionId
  }

  /** The conversation now: the rows committed since the last read are read and added. */
  async read(): Promise<ConversationEntry[]> {
    // Taken before the read: a write landing after it moves the mark, and the next read looks again.
    const mark = this.store.writeMark?.()
    if (this.loaded && mark !== undefined && mark === this.mark) return this.entries
    this.mark = mark
    if (!this.loaded) {
      this.entries = await loadConversation(this.store.db, this.sessionId)
      this.loaded = true
      return this.entries
    }
    const last = this.entries.at(-1)?.ordinal ?? 0
    const fresh = await loadConversation(this.store.db, this.sessionId, last)
    // Ordinals follow one another: a gap means someone else rewrote the conversation, read it whole.
    if (fresh.length > 0 && fresh[0]!.ordinal !== last + 1 && last !== 0) {
      this.loaded = false
      this.mark = undefined
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
      this.mark = undefined
      return
    }
    this.entries = [{ ...this.entries[at]!, message: summary, tokens: estimateTokens(summary) }, ...this.entries.slice(at + 1)]
  }
}
