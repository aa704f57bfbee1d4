import { Type, type Static, type TSchema } from 'typebox'
import { SessionStatus } from '../sessions/sessions.schema.ts'
import { ToolEntryOut } from '../tools/tools.schema.ts'
import { TurnErrorCode } from '../turns/turns.schema.ts'

/*
 * Every event the service records or streams, with the schema of its payload: the one list that
 * recording is typed by (a misspelt name or payload does not compile), that the published
 * vocabulary, the webhook event types and the OpenAPI unions are derived from. Each schema
 * describes what is written today; rows already in the log were written the same way.
 */

const TurnRef = (description: string) => Type.Object({ turnId: Type.String() }, { additionalProperties: false, description })
const Delta = (description: string) => Type.Object({ delta: Type.String() }, { additionalProperties: false, description })
const Text = (description: string) => Type.Object({ text: Type.String() }, { additionalProperties: false, description })
const Queued = (description: string) =>
  Type.Object({ text: Type.String(), position: Type.Integer({ description: 'Place in the queue, 1 first.' }) }, { additionalProperties: false, description })
const SandboxState = (description: string) =>
  Type.Object({ state: Type.String({ description: 'The workspace state after the change: running or paused.' }) }, { additionalProperties: false, description })
const SessionRef = (description: string) => Type.Object({ session_id: Type.String() }, { additionalProperties: false, description })

const SessionSignal = (description: string) =>
  Type.Object(
    {
      session_id: Type.String(),
      status: SessionStatus,
      turn_id: Type.Optional(Type.String()),
      required_action: Type.Optional(Type.Object({ type: Type.Literal('function_call'), call_id: Type.String(), name: Type.String() }, { additionalProperties: false })),
    },
    { additionalProperties: false, description },
  )
const TurnOutcome = (description: string) =>
  Type.Object(
    { session_id: Type.String(), turn_id: Type.String(), status: Type.Union([Type.Literal('completed'), Type.Literal('cancelled'), Type.Literal('failed')]) },
    { additionalProperties: false, description },
  )

/**
 * How an event leaves the service. `item`: published and persisted, read back as an item of that
 * type. `live`: published on streams only, never stored. `as`: an internal event published under
 * another name (its item type is that name's). None of these: internal (the log, webhooks).
 * `webhook`: a webhook event type, sent under its own name.
 */
type EventSpec = { payload: TSchema; item?: string; live?: true; as?: string; webhook?: true }

export const EVENTS = {
  'turn.started': { item: 'turn_started', payload: TurnRef('A run began.') },
  'turn.ended': { item: 'turn_ended', payload: TurnRef('A run finished; success is a property of the turn, read by turn_id.') },
  'agent.text': { live: true, payload: Delta('Token delta.') },
  'agent.message': { item: 'message', payload: Text('Settled assistant message.') },
  'agent.thinking': { live: true, payload: Delta('Reasoning delta.') },
  'agent.tool_call': {
    item: 'tool_call',
    payload: Type.Object({ toolCallId: Type.String(), toolName: Type.String(), args: Type.Unknown() }, { additionalProperties: false, description: 'The agent called a sandbox tool.' }),
  },
  'agent.tool_result': {
    item: 'tool_call',
    payload: Type.Object(
      { toolCallId: Type.String(), toolName: Type.String(), isError: Type.Boolean(), cancelled: Type.Boolean(), summary: Type.String() },
      { additionalProperties: false, description: 'A sandbox tool answered.' },
    ),
  },
  'agent.compaction': {
    item: 'compaction',
    payload: Type.Object({ before: Type.Integer(), after: Type.Integer() }, { additionalProperties: false, description: 'Context compacted: token counts before and after.' }),
  },
  'agent.error': {
    item: 'error',
    payload: Type.Object(
      { message: Type.String(), code: TurnErrorCode },
      { additionalProperties: false, description: 'The run failed; code is the turn error code.' },
    ),
  },
  'agent.todos': {
    item: 'todos',
    payload: Type.Object(
      { items: Type.Array(Type.Object({ label: Type.String(), status: Type.String() }, { additionalProperties: false })) },
      { additionalProperties: false, description: 'The task list changed.' },
    ),
  },
  'user.message': { item: 'user_message', payload: Text('Input recorded (a new turn or text steered into the running one).') },
  'message.queued': { item: 'message_queued', payload: Queued('Input arrived while a turn ran.') },
  'message.dequeued': { item: 'message_dequeued', payload: Queued('A queued message started.') },
  'file.changed': {
    item: 'file_change',
    payload: Type.Object(
      { path: Type.String(), kind: Type.Union([Type.Literal('created'), Type.Literal('modified'), Type.Literal('deleted')]), diff: Type.Optional(Type.String()) },
      { additionalProperties: false, description: 'A workspace file changed.' },
    ),
  },
  'approval.requested': {
    item: 'approval',
    payload: Type.Object(
      { toolCallId: Type.String(), name: Type.String(), args: Type.Unknown(), sensitive: Type.Boolean({ description: 'The call writes.' }) },
      { additionalProperties: false, description: 'The agent wants permission.' },
    ),
  },
  'approval.resolved': {
    item: 'approval',
    payload: Type.Object(
      {
        toolCallId: Type.String(),
        approved: Type.Boolean(),
        name: Type.Optional(Type.String({ description: 'On a refusal: the tool.' })),
        code: Type.Optional(
          Type.Union([Type.Literal('denied_read_only'), Type.Literal('denied_by_rule'), Type.Literal('approval_timeout'), Type.Literal('denied_by_user'), Type.Literal('turn_ended')], {
            description: 'On a refusal: why. turn_ended: the turn ended (cancelled, failed, its session deleted) before anyone answered.',
          }),
        ),
        reason: Type.Optional(Type.String({ description: 'On a refusal: the reason given to the agent.' })),
      },
      { additionalProperties: false, description: 'Permission granted or refused.' },
    ),
  },
  'question.asked': {
    item: 'question',
    payload: Type.Object(
      { toolCallId: Type.String(), question: Type.String(), options: Type.Optional(Type.Array(Type.String())), allowFreeform: Type.Optional(Type.Boolean()) },
      { additionalProperties: false, description: 'The agent asked a person.' },
    ),
  },
  'question.answered': {
    item: 'question',
    payload: Type.Object(
      {
        toolCallId: Type.String(),
        answer: Type.String({ description: 'Empty when cancelled.' }),
        cancelled: Type.Optional(Type.Boolean({ description: 'true: nobody answered, the turn ended first (cancelled, failed, its session deleted).' })),
      },
      { additionalProperties: false, description: 'The question was answered, or closed unanswered when its turn ended.' },
    ),
  },
  'tool.required': {
    item: 'function_call',
    payload: Type.Object(
      { toolCallId: Type.String(), name: Type.String(), arguments: Type.Unknown() },
      { additionalProperties: false, description: "The caller's function must be answered." },
    ),
  },
  'tool.resolved': {
    item: 'function_call',
    payload: Type.Object(
      {
        toolCallId: Type.String(),
        name: Type.String(),
        success: Type.Boolean({ description: 'false when answered with an error, or cancelled.' }),
        cancelled: Type.Optional(Type.Boolean({ description: 'true: the caller never answered, the turn ended first (cancelled, failed, its session deleted).' })),
      },
      { additionalProperties: false, description: "The caller's function was answered, or closed unanswered when its turn ended." },
    ),
  },
  'mcp.unavailable': {
    item: 'mcp_unavailable',
    payload: Type.Object(
      { server: Type.String(), reason: Type.String() },
      { additionalProperties: false, description: 'A declared tool server would not connect and was skipped; the turn continues.' },
    ),
  },
  'sandbox.created': { item: 'sandbox', payload: SandboxState('The workspace came up.') },
  'sandbox.paused': { item: 'sandbox', payload: SandboxState('The workspace paused.') },
  'sandbox.resumed': { item: 'sandbox', payload: SandboxState('The workspace resumed.') },
  // Beyond the specification (an addition, design/decisions.md §5): the image of a workspace that
  // is coming up, as it comes; at most one a second, and one when the last layer is held.
  'sandbox.image_progress': {
    item: 'sandbox',
    payload: Type.Object(
      {
        state: Type.Literal('pending', { description: 'The workspace waits on its image.' }),
        ref: Type.String({ description: 'The image reference being pulled.' }),
        bytes: Type.Integer({ description: "Compressed bytes of the image's layers held so far." }),
        totalBytes: Type.Integer({ description: "Compressed bytes of all the image's layers." }),
        layers: Type.Integer({ description: 'Layers of the image.' }),
        layersLeft: Type.Integer({ description: 'Layers not held yet.' }),
      },
      { additionalProperties: false, description: "The workspace's image is being pulled: how far." },
    ),
  },
  'preview.ready': {
    item: 'preview',
    payload: Type.Object({ port: Type.Integer(), url: Type.String() }, { additionalProperties: false, description: 'A served port is reachable.' }),
  },
  'workspace.recovery_failed': {
    item: 'error',
    payload: Type.Object({ message: Type.String() }, { additionalProperties: false, description: 'A workspace could not be restored.' }),
  },
  'artifact.created': {
    item: 'artifact',
    payload: Type.Object(
      { id: Type.String(), path: Type.String(), size_bytes: Type.Integer(), turn_id: Type.String() },
      { additionalProperties: false, description: 'A turn published a file.' },
    ),
  },

  // Internal: recorded in the log, never streamed or listed as items.
  'session.error': {
    as: 'agent.error',
    payload: Type.Object(
      { message: Type.String(), path: Type.Optional(Type.String({ description: 'The seed file concerned.' })) },
      { additionalProperties: false, description: 'Something failed outside a run (a seed file that could not be written).' },
    ),
  },
  'session.created': { webhook: true, payload: SessionRef('A session was created.') },
  'session.action_required': { webhook: true, payload: SessionSignal('The agent waits on the caller.') },
  'session.working': { webhook: true, payload: SessionSignal('A turn started.') },
  'session.idle': { webhook: true, payload: SessionSignal('The session went quiet.') },
  'session.failed': { webhook: true, payload: SessionSignal('The last turn failed.') },
  'turn.completed': { webhook: true, payload: TurnOutcome('A turn finished successfully.') },
  'turn.failed': { webhook: true, payload: TurnOutcome('A turn failed or was cancelled.') },
  'session.deleted': { payload: SessionRef('The session was deleted: its streams end.') },
  'session.tools_updated': {
    payload: Type.Object({ tools: Type.Array(ToolEntryOut) }, { additionalProperties: false, description: "The session's tools were replaced (credentials withheld)." }),
  },
} as const satisfies Record<string, EventSpec>

export type EventName = keyof typeof EVENTS
export type EventPayloads = { [N in EventName]: Static<(typeof EVENTS)[N]['payload']> }

/** One event of any name with its payload, for code that carries events to be recorded later. */
export type AnyEvent = { [N in EventName]: { type: N; payload: EventPayloads[N] } }[EventName]

/** Names published on streams only (token deltas): never stored. */
export type LiveEventName = { [N in EventName]: (typeof EVENTS)[N] extends { live: true } ? N : never }[EventName]

/** Names sent to webhook subscribers. */
export type WebhookEventName = { [N in EventName]: (typeof EVENTS)[N] extends { webhook: true } ? N : never }[EventName]
