import {
  APICallError,
  EmptyResponseBodyError,
  experimental_streamLanguageModelCall as streamModelCall,
  InvalidResponseDataError,
  JSONParseError,
  TypeValidationError,
  type LanguageModel,
  type ModelMessage,
  type ToolSet,
} from 'ai'
// The SDK's own assembly of a step's content into the messages to send back (streamText's).
import { toResponseMessages } from 'ai/internal'
import { MODEL_REFUSED } from '../models/models.schema.ts'
import { classifyAddress } from '../shared/address-policy.ts'
import { isRefusedAddress } from '../shared/guarded-lookup.ts'

export type ToolCallRequest = { toolCallId: string; toolName: string; input: unknown }

export type StepResult = {
  /** The assistant message(s) exactly as the SDK builds them (reasoning signatures included), to send back next step. */
  messages: ModelMessage[]
  text: string
  toolCalls: ToolCallRequest[]
  usage: { input: number; output: number }
}

export type StepRequest = {
  model: LanguageModel
  instructions: string
  messages: ModelMessage[]
  tools: ToolSet
  maxOutputTokens?: number
  signal: AbortSignal
  /** A stream that sends nothing for this long is abandoned and retried. */
  stallMs: number
  onText(delta: string): void
  onThinking(delta: string): void
}

/**
 * Why a model call failed, in the terms the runner acts on: `retryable` is tried again after a
 * pause, `unauthorized` and `fatal` fail the turn, `context` asks for compaction first.
 */
export class ProviderFailure extends Error {
  readonly kind: 'retryable' | 'unauthorized' | 'context' | 'fatal'
  constructor(kind: ProviderFailure['kind'], message: string, options?: ErrorOptions) {
    super(message, options)
    this.kind = kind
  }
}

const CONTEXT_MESSAGE = /context[_ ]length|context window|prompt is too long|maximum context|too many tokens|input is too long/i

/**
 * A call the outbound policy refused before connecting. A literal address says what it is; a name
 * does not say what it resolved to (the caller learns nothing of what the host's resolver knows).
 */
function refusedCall(err: unknown): ProviderFailure {
  const url = APICallError.isInstance(err) ? err.url : ''
  const host = URL.canParse(url) ? new URL(url).hostname.replace(/^\[|\]$/g, '') : 'of the connection'
  const kind = classifyAddress(host)?.kind
  const what = kind && kind !== 'not an IP address' ? `is ${kind}` : 'resolves to an address this deployment does not allow'
  return new ProviderFailure('fatal', `The model connection's base_url host ${host} ${what}: ${MODEL_REFUSED}. No connection was made.`, { cause: err })
}

/** Errors that carry the far end's own bytes (a body that is not the provider's protocol) in their message. */
const UNREADABLE = [JSONParseError, TypeValidationError, InvalidResponseDataError, EmptyResponseBodyError]

/**
 * Sorts an error from the SDK or the network into a ProviderFailure. Its message repeats the
 * provider's own error message and status, never other bytes the far end sent.
 */
export function classifyProviderError(err: unknown): ProviderFailure {
  if (err instanceof ProviderFailure) return err
  if (isRefusedAddress(err)) return refusedCall(err)
  if (UNREADABLE.some((e) => e.isInstance(err))) return new ProviderFailure('retryable', 'The model provider answered with something other than its protocol.', { cause: err })
  if (APICallError.isInstance(err)) {
    const status = err.statusCode ?? 0
    const detail = `${err.message}${status ? ` (HTTP ${status})` : ''}`
    if (status === 401 || status === 403) return new ProviderFailure('unauthorized', `The model provider refused the key: ${detail}`, { cause: err })
    if (CONTEXT_MESSAGE.test(`${err.message} ${err.responseBody ?? ''}`)) return new ProviderFailure('context', `The model's context window is full: ${detail}`, { cause: err })
    if (err.isRetryable || status === 408 || status === 409 || status === 429 || status >= 500 || status === 0) return new ProviderFailure('retryable', `The model provider failed: ${detail}`, { cause: err })
    return new ProviderFailure('fatal', `The model provider refused the request: ${detail}`, { cause: err })
  }
  // An error part of the stream is the provider's own error object ({message, type, code}).
  const message = err instanceof Error ? err.message : typeof (err as { message?: unknown } | null)?.message === 'string' ? (err as { message: string }).message : 'an error without a message'
  // Resets, refused connections and malformed streams: the provider may well answer next time.
  return new ProviderFailure('retryable', `The model provider could not be reached: ${message}`, { cause: err })
}

/**
 * One model call, streamed: deltas go to the callbacks as they arrive, and the settled assistant
 * message comes back for the runner to persist before anything else happens. Tools carry no
 * `execute`: the runner decides and runs them itself. One call, not streamText's loop of steps:
 * the SDK's single-call stream standardizes the prompt, speaks the provider's protocol and parses
 * tool calls as streamText does, without the stitching, teeing and step machinery around it
 * (about 1 ms an agent step). Rejects with a ProviderFailure, or with the signal's reason when the
 * turn was aborted.
 */
export async function runModelStep(req: StepRequest): Promise<StepResult> {
  const attempt = new AbortController()
  const stop = () => attempt.abort(req.signal.reason)
  if (req.signal.aborted) throw req.signal.reason
  req.signal.addEventListener('abort', stop, { once: true })
  let stalled = false
  let timer: NodeJS.Timeout | undefined
  const arm = () => {
    clearTimeout(timer)
    timer = setTimeout(() => {
      stalled = true
      attempt.abort(new Error('stalled'))
    }, req.stallMs)
  }
  try {
    arm()
    /** What the call produced, as the SDK collected it (text, reasoning with its signatures, tool calls). */
    let content: Parameters<typeof toResponseMessages>[0]['content'] | null = null
    const { stream } = await streamModelCall({
      model: req.model,
      instructions: req.instructions,
      messages: req.messages,
      tools: req.tools,
      maxOutputTokens: req.maxOutputTokens,
      abortSignal: attempt.signal,
      onLanguageModelCallEnd: (end) => {
        content = [...end.content]
      },
    })
    const toolCalls: ToolCallRequest[] = []
    let text = ''
    let usage = { input: 0, output: 0 }
    let failure: unknown = null
    for await (const part of stream) {
      arm()
      if (part.type === 'text-delta') {
        text += part.text
        req.onText(part.text)
      } else if (part.type === 'reasoning-delta') req.onThinking(part.text)
      else if (part.type === 'tool-call') toolCalls.push({ toolCallId: part.toolCallId, toolName: part.toolName, input: part.input })
      else if (part.type === 'model-call-end') usage = { input: part.usage.inputTokens ?? 0, output: part.usage.outputTokens ?? 0 }
      else if (part.type === 'error') failure ??= part.error
    }
    if (req.signal.aborted) throw req.signal.reason
    if (stalled) throw new ProviderFailure('retryable', `The model stream sent nothing for ${Math.round(req.stallMs / 1000)} s and was abandoned.`)
    if (failure) throw classifyProviderError(failure)
    if (!content) throw new ProviderFailure('retryable', 'The model stream ended before the model finished its answer.')
    // Only the assistant message: the results of its calls are the runner's to give.
    const messages = (await toResponseMessages({ content, tools: req.tools })).filter((m) => m.role === 'assistant') as ModelMessage[]
    return { messages, text, toolCalls, usage }
  } catch (err) {
    if (req.signal.aborted) throw req.signal.reason
    if (stalled) throw new ProviderFailure('retryable', `The model stream sent nothing for ${Math.round(req.stallMs / 1000)} s and was abandoned.`)
    throw classifyProviderError(err)
  } finally {
    clearTimeout(timer)
    req.signal.removeEventListener('abort', stop)
  }
}
