import { Type, type Static } from 'typebox'
import { FileInputs } from '../files/files.schema.ts'
import { OrderedListQuery } from '../http/pagination.ts'

export const TurnStatus = Type.Union([Type.Literal('working'), Type.Literal('completed'), Type.Literal('failed'), Type.Literal('cancelled')], {
  description: 'A turn is working from the moment its input is accepted, including while it waits behind another; a settled turn never moves again.',
})
export type TurnStatus = Static<typeof TurnStatus>

export const TurnErrorCode = Type.Union(
  [
    Type.Literal('provider_error'),
    Type.Literal('provider_unauthorized'),
    Type.Literal('context_length_exceeded'),
    Type.Literal('sandbox_error'),
    Type.Literal('sandbox_unavailable'),
    Type.Literal('workspace_recovery_failed'),
    Type.Literal('internal_error'),
  ],
  { description: 'Why the turn failed.' },
)
export type TurnErrorCode = Static<typeof TurnErrorCode>
export const TurnError = Type.Object({ code: TurnErrorCode, message: Type.String() }, { $id: 'TurnError', additionalProperties: false })
export type TurnError = Static<typeof TurnError>

export const ArtifactsState = Type.Union([Type.Literal('pending'), Type.Literal('ready'), Type.Literal('partial'), Type.Literal('failed'), Type.Null()])

export const Turn = Type.Object(
  {
    object: Type.Literal('turn'),
    id: Type.String({ description: 'Quote it when reporting a problem.' }),
    session_id: Type.String(),
    status: TurnStatus,
    created_at: Type.Integer({ description: 'Unix ms: when the input was accepted.' }),
    started_at: Type.Union([Type.Integer(), Type.Null()], { description: 'Unix ms: when the agent began; null while the turn waits. The only field that separates waiting from running.' }),
    completed_at: Type.Union([Type.Integer(), Type.Null()], { description: 'Unix ms: when the turn settled.' }),
    artifacts: ArtifactsState,
    artifacts_skipped: Type.Array(Type.Object({ path: Type.String(), reason: Type.String() }, { additionalProperties: false })),
    subagent_id: Type.Null({ description: 'Always null; reserved.' }),
    error: Type.Union([TurnError, Type.Null()]),
  },
  { $id: 'Turn', additionalProperties: false },
)
export type Turn = Static<typeof Turn>

export const SendMessageBody = Type.Object(
  {
    text: Type.String({ minLength: 1, description: 'The message.' }),
    steer: Type.Optional(
      Type.Boolean({
        description: 'On a busy session, deliver the text into the running turn at its next step instead of queueing a new turn; the response is the running turn.',
      }),
    ),
    files: Type.Optional(FileInputs),
  },
  { $id: 'SendMessageRequest', additionalProperties: false },
)
export type SendMessageBody = Static<typeof SendMessageBody>

export const TurnParams = Type.Object({ session_id: Type.String(), turn_id: Type.String() }, { additionalProperties: false })
export const ListTurnsQuery = Type.Object({ ...OrderedListQuery }, { additionalProperties: false })

export const RequiredActionParams = Type.Object({ session_id: Type.String(), call_id: Type.String() }, { additionalProperties: false })
export const ToolCallParams = Type.Object({ session_id: Type.String(), tool_call_id: Type.String() }, { additionalProperties: false })

export const AnswerRequiredActionBody = Type.Object(
  {
    output: Type.Optional(Type.Unknown({ description: "The function's result, any JSON value." })),
    error: Type.Optional(Type.String({ minLength: 1, description: 'The function failed; the agent is told this message.' })),
  },
  { $id: 'AnswerRequiredActionRequest', additionalProperties: false, minProperties: 1, description: 'Exactly one of output or error.' },
)
export type AnswerRequiredActionBody = Static<typeof AnswerRequiredActionBody>

export const AnswerApprovalBody = Type.Object(
  {
    approved: Type.Boolean(),
    reason: Type.Optional(Type.String({ maxLength: 2000, description: 'Told to the agent with a refusal.' })),
  },
  { $id: 'AnswerApprovalRequest', additionalProperties: false },
)
export type AnswerApprovalBody = Static<typeof AnswerApprovalBody>

export const Approval = Type.Object(
  {
    object: Type.Literal('approval'),
    tool_call_id: Type.String(),
    session_id: Type.String(),
    turn_id: Type.String(),
    name: Type.String({ description: 'The tool that asked.' }),
    args: Type.Unknown(),
    approved: Type.Boolean(),
    reason: Type.Union([Type.String(), Type.Null()]),
    created_at: Type.Integer(),
    resolved_at: Type.Integer(),
  },
  { $id: 'Approval', additionalProperties: false },
)
export type Approval = Static<typeof Approval>

export const AnswerQuestionBody = Type.Object({ answer: Type.String({ minLength: 1, maxLength: 100_000 }) }, { $id: 'AnswerQuestionRequest', additionalProperties: false })
export type AnswerQuestionBody = Static<typeof AnswerQuestionBody>

export const Question = Type.Object(
  {
    object: Type.Literal('question'),
    tool_call_id: Type.String(),
    session_id: Type.String(),
    turn_id: Type.String(),
    question: Type.String(),
    answer: Type.String(),
    created_at: Type.Integer(),
    resolved_at: Type.Integer(),
  },
  { $id: 'Question', additionalProperties: false },
)
export type Question = Static<typeof Question>
