import { it } from 'node:test'
import assert from 'node:assert/strict'
import type { ModelMessage } from 'ai'
import { forEachDialect, useWarren } from './harness.ts'
import { appendConversation, compactConversation, loadConversation } from '../src/turns/conversation.store.ts'
import { ConversationView } from '../src/runner/conversation-view.ts'

/**
 * The driver reads a session's conversation through a ConversationView: whole once, then only
 * what is new. Whatever it holds must equal what the store says the model sees.
 */
forEachDialect('the conversation as a driver reads it', (dialect) => {
  const w = useWarren(dialect)
  const user = (text: string): ModelMessage => ({ role: 'user', content: text })
  const tool = (id: string, text: string): ModelMessage => ({
    role: 'tool',
    content: [{ type: 'tool-result', toolCallId: id, toolName: 'bash', output: { type: 'text', value: text } }],
  })
  const same = async (view: ConversationView, sessionId: string) => assert.deepEqual(await view.read(), await loadConversation(w().store.db, sessionId))

  it('reads what each move appended, in order, as the store has it', async () => {
    const db = w().store.db
    const sid = `ses_view_${dialect}_append`
    const view = new ConversationView(w().store, sid)
    assert.deepEqual(await view.read(), [])
    await appendConversation(db, sid, 'turn_a', [user('one')], 1)
    await same(view, sid)
    await appendConversation(db, sid, 'turn_a', [tool('c1', 'out 1'), tool('c2', 'out 2')], 2)
    await appendConversation(db, sid, 'turn_b', [user('two')], 3)
    await same(view, sid)
    assert.deepEqual((await view.read()).map((e) => e.ordinal), [1, 2, 3, 4])
  })

  it('asks the store again only when something was written since its last read (where the store marks writes)', async () => {
    const store = w().store
    const sid = `ses_view_${dialect}_quiet`
    let reads = 0
    // Counts the view's reads of the store: built queries, and prepared ones (run as compiled).
    const counted = new Set<string | symbol>(['selectFrom', 'executeQuery'])
    const db = new Proxy(store.db, {
      get: (t, k) => {
        if (counted.has(k)) reads++
        const v = Reflect.get(t, k, t)
        return typeof v === 'function' ? v.bind(t) : v
      },
    })
    const view = new ConversationView({ db, writeMark: store.writeMark }, sid)
    await appendConversation(store.db, sid, 'turn_a', [user('one')], 1)
    await same(view, sid)
    const first = reads
    await view.read()
    await view.read()
    assert.equal(reads - first, store.writeMark ? 0 : 2, 'nothing written: nothing read')
    // Any write at all, even of another session, and the next read looks.
    await appendConversation(store.db, `${sid}_other`, 'turn_b', [user('elsewhere')], 2)
    await view.read()
    assert.equal(reads - first, store.writeMark ? 1 : 3)
    await appendConversation(store.db, sid, 'turn_a', [user('two')], 3)
    await same(view, sid)
  })

  it('holds a compaction it was told of, and what follows it', async () => {
    const db = w().store.db
    const sid = `ses_view_${dialect}_compact`
    const view = new ConversationView(w().store, sid)
    await appendConversation(db, sid, 'turn_a', [user('one'), tool('c1', 'x'.repeat(5000)), user('two'), tool('c2', 'y')], 1)
    await same(view, sid)
    const summary = user('[summary of one and its call]')
    await compactConversation(db, sid, 2, summary, 2)
    view.compacted(2, summary)
    await same(view, sid)
    assert.deepEqual((await view.read())[0]!.message, summary)
    await appendConversation(db, sid, 'turn_a', [user('three')], 3)
    await same(view, sid)
  })

  it('reads the conversation whole again when what follows it was compacted behind it', async () => {
    const db = w().store.db
    const sid = `ses_view_${dialect}_rewritten`
    const view = new ConversationView(w().store, sid)
    await appendConversation(db, sid, 'turn_a', [user('one'), user('two'), user('three')], 1)
    await same(view, sid)
    // Another writer (the view was not told) appended two and compacted up to the second: the
    // rows the view holds are gone from what the model sees, and the next read must say so.
    await appendConversation(db, sid, 'turn_a', [user('four'), user('five')], 2)
    await compactConversation(db, sid, 5, user('[summary]'), 3)
    await same(view, sid)
    assert.equal((await view.read()).length, 1)
  })
})
