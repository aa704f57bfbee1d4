import type { ToolResult, Turn, WireCodec, WireError } from './model-server.ts'
import { textOf } from './wire-text.ts'

// OpenAI's chat completions dialect, as api.openai.com and the openai-compatible servers speak it.

const sse = (data: unknown) => `data: ${JSON.stringify(data)}\n\n`

const usageOf = (t: Turn) => ({
  prompt_tokens: t.usage.input,
  completion_tokens: t.usage.output,
  total_tokens: t.usage.input + t.usage.output,
  prompt_tokens_details: { cached_tokens: 0 },
  completion_tokens_details: { reasoning_tokens: 0 },
})

const finishReason = (t: Turn) => (t.toolCalls.length > 0 ? 'tool_calls' : 'stop')
const now = () => Math.floor(Date.now() / 1000)

/** The limit the context-length refusal quotes; any number above the estimate's floor reads right. */
const CONTEXT_WINDOW = 128_000

export const openaiWire: WireCodec = {
  toolIdPrefix: 'call_',

  parse(body) {
    const messages: any[] = Array.isArray(body?.messages) ? body.messages : []
    const system = messages.filter((m) => m?.role === 'system' || m?.role === 'developer').map((m) => textOf(m.content))
    const toolResults: ToolResult[] = messages
      .filter((m) => m?.role === 'tool')
      .map((m) => ({ toolCallId: String(m.tool_call_id), content: textOf(m.content) }))
    const userTexts = messages.filter((m) => m?.role === 'user').map((m) => textOf(m.content)).filter((s) => s !== '')
    return {
      model: String(body?.model ?? ''),
      messages,
      system: system.length > 0 ? system.join('\n\n') : null,
      tools: Array.isArray(body?.tools) ? body.tools.map((t: any) => String(t?.function?.name ?? t?.name)) : [],
      toolResults,
      lastUserText: userTexts.at(-1) ?? null,
    }
  },

  stream(t, partial) {
    const base = {
      id: `chatcmpl-fake${t.seq}`,
      object: 'chat.completion.chunk',
      created: now(),
      model: t.model,
      system_fingerprint: 'fp_fake',
      // OpenAI puts `usage: null` on every chunk once usage was asked for; the real figures come last.
      ...(t.includeUsage ? { usage: null } : {}),
    }
    const frame = (delta: object, finish: string | null = null) =>
      sse({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })
    // OpenAI opens text replies with `content: ""` and tool-only replies with `content: null`;
    // the openai chat client turns the empty string into an (empty) text part.
    const frames = [frame({ role: 'assistant', content: t.text.length > 0 ? '' : null, refusal: null })]
    for (const r of t.thinking) frames.push(frame({ reasoning_content: r }))
    for (const c of t.text) frames.push(frame({ content: c }))
    t.toolCalls.forEach((call, index) => {
      frames.push(frame({ tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] }))
      for (const a of call.argChunks) frames.push(frame({ tool_calls: [{ index, function: { arguments: a } }] }))
    })
    if (partial) return frames
    frames.push(frame({}, finishReason(t)))
    if (t.includeUsage) frames.push(sse({ ...base, choices: [], usage: usageOf(t) }))
    frames.push('data: [DONE]\n\n')
    return frames
  },

  json(t) {
    const message = {
      role: 'assistant',
      content: t.text.length > 0 ? t.text.join('') : null,
      ...(t.thinking.length > 0 ? { reasoning_content: t.thinking.join('') } : {}),
      ...(t.toolCalls.length > 0
        ? { tool_calls: t.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.argChunks.join('') } })) }
        : {}),
      refusal: null,
      annotations: [],
    }
    return {
      id: `chatcmpl-fake${t.seq}`,
      object: 'chat.completion',
      created: now(),
      model: t.model,
      choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason(t) }],
      usage: usageOf(t),
      system_fingerprint: 'fp_fake',
    }
  },

  error(e: WireError) {
    const err = (message: string, type: string, code: string | null, param: string | null = null) => ({
      error: { message: e.message ?? message, type, param, code },
    })
    switch (e.kind) {
      case 'unauthorized':
        return err('Incorrect API key provided.', 'invalid_request_error', 'invalid_api_key')
      case 'rate_limit':
        return err('Rate limit reached for requests. Please try again later.', 'requests', 'rate_limit_exceeded')
      case 'context_length': {
        const used = Math.max(e.inputTokens, CONTEXT_WINDOW + 1)
        return err(
          `This model's maximum context length is ${CONTEXT_WINDOW} tokens. However, your messages resulted in ${used} tokens. Please reduce the length of the messages.`,
          'invalid_request_error',
          'context_length_exceeded',
          'messages',
        )
      }
      case 'overloaded':
        return err('The server is overloaded or not ready yet.', 'server_error', null)
      case 'server':
        return err('The server had an error while processing your request. Sorry about that!', 'server_error', null)
      case 'not_found':
        return err('Unknown request URL.', 'invalid_request_error', 'unknown_url')
      case 'invalid_request':
        return err('Invalid request.', 'invalid_request_error', null)
    }
  },
}
