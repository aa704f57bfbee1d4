import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { EVENTS } from './events.schema.ts'
import { PERSISTED_PUBLIC_TYPES, PUBLISHED_EVENTS, WEBHOOK_EVENT_TYPES, persistedInternalTypes, publicName } from './vocabulary.ts'

/** The specification's stream vocabulary (an allowlist), persisted or not, and its webhook event types. */
const SPEC_PERSISTED = [
  'turn.started', 'turn.ended', 'agent.message', 'agent.tool_call', 'agent.tool_result', 'agent.compaction', 'agent.error', 'agent.todos',
  'user.message', 'message.queued', 'message.dequeued', 'file.changed', 'approval.requested', 'approval.resolved', 'question.asked',
  'question.answered', 'tool.required', 'tool.resolved', 'mcp.unavailable', 'sandbox.created', 'sandbox.paused', 'sandbox.resumed',
  'preview.ready', 'workspace.recovery_failed', 'artifact.created',
]
/** Warren's additions to the persisted vocabulary (design/decisions.md §5: clients ignore what they do not know). */
const ADDED_PERSISTED = ['sandbox.image_progress']
const SPEC_LIVE = ['agent.text', 'agent.thinking']
const SPEC_WEBHOOKS = ['session.created', 'session.action_required', 'session.working', 'session.idle', 'session.failed', 'turn.completed', 'turn.failed']

describe('event vocabulary, derived from the event schemas', () => {
  it("publishes exactly the specification's allowlist, persisted as it says", () => {
    assert.deepEqual(Object.keys(PUBLISHED_EVENTS).sort(), [...SPEC_PERSISTED, ...ADDED_PERSISTED, ...SPEC_LIVE].sort())
    assert.deepEqual([...PERSISTED_PUBLIC_TYPES].sort(), [...SPEC_PERSISTED, ...ADDED_PERSISTED].sort())
    for (const name of SPEC_LIVE) assert.deepEqual(PUBLISHED_EVENTS[name], { persisted: false })
  })

  it('gives each persisted event its item type: tool_call for both tool events, mcp_unavailable for mcp.unavailable', () => {
    assert.equal(PUBLISHED_EVENTS['agent.tool_call']!.item, 'tool_call')
    assert.equal(PUBLISHED_EVENTS['agent.tool_result']!.item, 'tool_call')
    assert.equal(PUBLISHED_EVENTS['mcp.unavailable']!.item, 'mcp_unavailable')
    for (const name of SPEC_PERSISTED) assert.match(PUBLISHED_EVENTS[name]!.item ?? '', /^[a-z_]+$/, name)
  })

  it('keeps internal events internal, and publishes session.error as agent.error', () => {
    for (const name of [...SPEC_WEBHOOKS, 'session.deleted', 'session.tools_updated']) assert.equal(publicName(name), null, name)
    assert.equal(publicName('session.error'), 'agent.error')
    assert.equal(publicName('turn.started'), 'turn.started')
    assert.equal(publicName('no.such_event'), null)
    assert.deepEqual(persistedInternalTypes().sort(), [...SPEC_PERSISTED, ...ADDED_PERSISTED, 'session.error'].sort())
    // Every name the service records has a schema, published or not.
    for (const name of [...persistedInternalTypes(), ...SPEC_LIVE, ...SPEC_WEBHOOKS]) assert.ok(name in EVENTS, name)
  })

  it('sends the webhook event types in the order the specification lists them', () => {
    assert.deepEqual([...WEBHOOK_EVENT_TYPES], SPEC_WEBHOOKS)
  })
})
