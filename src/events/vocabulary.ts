/**
 * The published event vocabulary (an allowlist) and the item type each event is recorded under.
 * Internal events (session.created, session.working, …) drive webhooks and never leave the
 * service on a stream or as an item.
 */
export const PUBLISHED_EVENTS: Record<string, { persisted: boolean; item?: string }> = {
  'turn.started': { persisted: true, item: 'turn_started' },
  'turn.ended': { persisted: true, item: 'turn_ended' },
  'agent.text': { persisted: false },
  'agent.message': { persisted: true, item: 'message' },
  'agent.thinking': { persisted: false },
  'agent.tool_call': { persisted: true, item: 'tool_call' },
  'agent.tool_result': { persisted: true, item: 'tool_call' },
  'agent.compaction': { persisted: true, item: 'compaction' },
  'agent.error': { persisted: true, item: 'error' },
  'agent.todos': { persisted: true, item: 'todos' },
  'user.message': { persisted: true, item: 'user_message' },
  'message.queued': { persisted: true, item: 'message_queued' },
  'message.dequeued': { persisted: true, item: 'message_dequeued' },
  'file.changed': { persisted: true, item: 'file_change' },
  'approval.requested': { persisted: true, item: 'approval' },
  'approval.resolved': { persisted: true, item: 'approval' },
  'question.asked': { persisted: true, item: 'question' },
  'question.answered': { persisted: true, item: 'question' },
  'tool.required': { persisted: true, item: 'function_call' },
  'tool.resolved': { persisted: true, item: 'function_call' },
  'mcp.unavailable': { persisted: true, item: 'mcp_unavailable' },
  'sandbox.created': { persisted: true, item: 'sandbox' },
  'sandbox.paused': { persisted: true, item: 'sandbox' },
  'sandbox.resumed': { persisted: true, item: 'sandbox' },
  'preview.ready': { persisted: true, item: 'preview' },
  'workspace.recovery_failed': { persisted: true, item: 'error' },
  'artifact.created': { persisted: true, item: 'artifact' },
}

/** Internal names that differ from their published name. Everything else is published as itself. */
const PUBLIC_NAME: Record<string, string> = {
  // An error recorded outside a model run (a seed file that could not be written) is an agent.error item.
  'session.error': 'agent.error',
}

/** The published name of an internal event, or null when the event is internal only. */
export function publicName(internalType: string): string | null {
  const name = PUBLIC_NAME[internalType] ?? internalType
  return PUBLISHED_EVENTS[name] ? name : null
}

export const PERSISTED_PUBLIC_TYPES = Object.keys(PUBLISHED_EVENTS).filter((k) => PUBLISHED_EVENTS[k]!.persisted)

/** Internal types stored in the log whose published name is persisted: what items and replays read. */
export function persistedInternalTypes(): string[] {
  return [...PERSISTED_PUBLIC_TYPES, ...Object.keys(PUBLIC_NAME)]
}

export const WEBHOOK_EVENT_TYPES = [
  'session.created',
  'session.action_required',
  'session.working',
  'session.idle',
  'session.failed',
  'turn.completed',
  'turn.failed',
] as const
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number]
