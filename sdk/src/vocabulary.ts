// The published event vocabulary (interface.md, "Event vocabulary"): each event's payload, so a
// consumer branching on `type` gets the right fields. Items carry the same names in `detail.event`.

export type EventPayloads = {
  'turn.started': { turnId: string }
  'turn.ended': { turnId: string }
  'agent.text': { delta: string }
  'agent.message': { text: string }
  'agent.thinking': { delta: string }
  'agent.tool_call': { toolCallId: string; toolName: string; args: unknown }
  'agent.tool_result': { toolCallId: string; toolName: string; isError: boolean; cancelled: boolean; summary: string }
  'agent.compaction': { before: number; after: number }
  'agent.error': { message: string }
  'agent.todos': { items: { label: string; status: string }[] }
  'user.message': { text: string }
  'message.queued': { text: string; position?: number }
  'message.dequeued': { text: string; position?: number }
  'file.changed': { path: string; kind: 'created' | 'modified' | 'deleted'; diff?: string }
  'approval.requested': { toolCallId: string; name: string; args: unknown; sensitive: boolean }
  'approval.resolved': { toolCallId: string; approved: boolean; name?: string; code?: 'denied_read_only' | 'denied_by_rule' | 'approval_timeout'; [field: string]: unknown }
  'question.asked': { toolCallId: string; question: string; options?: string[]; allowFreeform?: boolean }
  'question.answered': { toolCallId: string; answer: string }
  'tool.required': { toolCallId: string; name: string; arguments: unknown }
  'tool.resolved': { toolCallId: string; name: string; success: boolean }
  'mcp.unavailable': { server: string; reason: string }
  'sandbox.created': { state: string }
  'sandbox.paused': { state: string }
  'sandbox.resumed': { state: string }
  'preview.ready': { port: number; url: string }
  'workspace.recovery_failed': { message: string }
  'artifact.created': { id: string; path: string; size_bytes: number; turn_id: string }
}

export type EventType = keyof EventPayloads

/** Events that stream live only: `seq` null, never replayed, never in items. */
export const TRANSIENT_EVENTS: readonly EventType[] = ['agent.text', 'agent.thinking']

type EventOf<T extends EventType> = {
  object: 'event'
  type: T
  /** The service's own name for the event, for reporting a problem. */
  internal_type: string
  session_id: string
  /** The event's place in the session's log; null for transient events. */
  seq: T extends 'agent.text' | 'agent.thinking' ? null : number | null
  created_at: number
  payload: EventPayloads[T]
}

/** One event as a stream frame's data carries it: a union on `type`, so `switch (e.type)` narrows `payload`. */
export type WarrenEvent = { [T in EventType]: EventOf<T> }[EventType]
