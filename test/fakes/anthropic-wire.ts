import type { ToolResult, Turn, WireCodec, WireError } from './model-server.ts'
import { textOf } from './wire-text.ts'

// Anthropic's messages dialect (api.anthropic.com/v1/messages, anthropic-version 2023-06-01).

const event = (type: string, data: object = {}) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`

const stopReason = (t: Turn) => (t.toolCalls.length > 0 ? 'tool_use' : 'end_turn')
/** Opaque like the real one; the client only carries it back with the thinking block. */
const signatureOf = (t: Turn) => Buffer.from(`fake-thinking-signature-${t.seq}`).toString('base64')

/** The limit the context-length refusal quotes. */
const CONTEXT_WINDOW = 200_000

export const anthropicWire: WireCodec = {
  toolIdPrefix: 'toolu_',

  parse(body) {
    const messages: any[] = Array.isArray(body?.messages) ? body.messages : []
    const toolResults: ToolResult[] = []
    for (const m of messages) {
      if (m?.role !== 'user' || !Array.isArray(m.content)) continue
      for (const b of m.content) {
        if (b?.type !== 'tool_result') continue
        toolResults.push({ toolCallId: String(b.tool_use_id), content: textOf(b.content), ...(b.is_error === true ? { isError: true } : {}) })
      }
    }
    const userTexts = messages.filter((m) => m?.role === 'user').map((m) => textOf(m.content)).filter((s) => s !== '')
    const system = body?.system === undefined ? null : textOf(body.system, '\n\n')
    return {
      model: String(body?.model ?? ''),
      messages,
      system: system === '' ? null : system,
      tools: Array.isArray(body?.tools) ? body.tools.map((t: any) => String(t?.name)) : [],
      toolResults,
      lastUserText: userTexts.at(-1) ?? null,
    }
  },

  stream(t, partial) {
    const frames = [
      event('message_start', {
        message: {
          id: `msg_fake${t.seq}`,
          type: 'message',
          role: 'assistant',
          model: t.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: t.usage.input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 },
        },
      }),
      event('ping'),
    ]
    let index = 0
    const block = (start: object, deltas: object[]) => {
      frames.push(event('content_block_start', { index, content_block: start }))
      for (const delta of deltas) frames.push(event('content_block_delta', { index, delta }))
      // A cut-off turn leaves its (text) block open, as a dropped connection would.
      if (!partial) frames.push(event('content_block_stop', { index }))
      index++
    }
    if (t.thinking.length > 0) {
      block({ type: 'thinking', thinking: '', signature: '' }, [
        ...t.thinking.map((thinking) => ({ type: 'thinking_delta', thinking })),
        { type: 'signature_delta', signature: signatureOf(t) },
      ])
    }
    if (t.text.length > 0) block({ type: 'text', text: '' }, t.text.map((text) => ({ type: 'text_delta', text })))
    for (const call of t.toolCalls) {
      // Anthropic opens every tool_use block with an empty partial_json.
      block({ type: 'tool_use', id: call.id, name: call.name, input: {} }, ['', ...call.argChunks].map((partial_json) => ({ type: 'input_json_delta', partial_json })))
    }
    if (partial) return frames
    frames.push(event('message_delta', { delta: { stop_reason: stopReason(t), stop_sequence: null }, usage: { output_tokens: t.usage.output } }))
    frames.push(event('message_stop'))
    return frames
  },

  json(t) {
    const content: object[] = []
    if (t.thinking.length > 0) content.push({ type: 'thinking', thinking: t.thinking.join(''), signature: signatureOf(t) })
    if (t.text.length > 0) content.push({ type: 'text', text: t.text.join('') })
    for (const c of t.toolCalls) content.push({ type: 'tool_use', id: c.id, name: c.name, input: c.args })
    return {
      id: `msg_fake${t.seq}`,
      type: 'message',
      role: 'assistant',
      model: t.model,
      content,
      stop_reason: stopReason(t),
      stop_sequence: null,
      usage: { input_tokens: t.usage.input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: t.usage.output },
    }
  },

  error(e: WireError) {
    const err = (type: string, message: string) => ({ type: 'error', error: { type, message: e.message ?? message } })
    switch (e.kind) {
      case 'unauthorized':
        return err('authentication_error', 'invalid x-api-key')
      case 'rate_limit':
        return err('rate_limit_error', 'This request would exceed the rate limit for your organization. Please try again later.')
      case 'context_length':
        return err('invalid_request_error', `prompt is too long: ${Math.max(e.inputTokens, CONTEXT_WINDOW + 1)} tokens > ${CONTEXT_WINDOW} maximum`)
      case 'overloaded':
        return err('overloaded_error', 'Overloaded')
      case 'server':
        return err('api_error', 'Internal server error')
      case 'not_found':
        return err('not_found_error', 'Not found')
      case 'invalid_request':
        return err('invalid_request_error', 'Invalid request')
    }
  },
}
