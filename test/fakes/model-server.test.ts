import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createAnthropic } from '@ai-sdk/anthropic'
import { createOpenAI } from '@ai-sdk/openai'
import { createOpenAICompatible } from '@ai-sdk/openai-compatible'
import { APICallError, generateText, jsonSchema, streamText, tool, type LanguageModel, type ModelMessage } from 'ai'
import { startModelServer, type FakeModelServer } from './model-server.ts'

// Drives the fake with the real provider clients, so a fake that drifts from what they parse fails here.

type Client = 'openai' | 'compatible' | 'anthropic'
const clients: Client[] = ['openai', 'compatible', 'anthropic']

const modelFor = (s: FakeModelServer, client: Client, key = s.key): LanguageModel =>
  client === 'openai'
    ? createOpenAI({ apiKey: key, baseURL: s.url }).chat('gpt-fake-1')
    : client === 'compatible'
      ? // Without includeUsage the compatible client never asks for usage, so none arrives.
        createOpenAICompatible({ name: 'fake', baseURL: s.url, apiKey: key, includeUsage: true })('gpt-fake-1')
      : createAnthropic({ apiKey: key, baseURL: s.url })('claude-fake-1')

const tools = {
  get_weather: tool({
    description: 'Weather for a city',
    inputSchema: jsonSchema<{ city: string }>({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false }),
  }),
}

type Run = { parts: any[]; error: unknown }
async function run(model: LanguageModel, opts: { prompt?: string; messages?: ModelMessage[]; system?: string; abortSignal?: AbortSignal; onPart?: (part: any) => void } = {}): Promise<Run> {
  const args = opts.messages ? { messages: opts.messages } : { prompt: opts.prompt ?? 'hi' }
  const result = streamText({ model, ...args, system: opts.system, tools, maxRetries: 0, maxOutputTokens: 1024, abortSignal: opts.abortSignal, onError: () => {} })
  const parts: any[] = []
  let error: unknown
  try {
    for await (const part of result.fullStream) {
      parts.push(part)
      opts.onPart?.(part)
      if (part.type === 'error') error ??= part.error
    }
  } catch (e) {
    error = e
  }
  return { parts, error }
}

const deltas = (r: Run, type: string) => r.parts.filter((p) => p.type === type).map((p) => p.delta ?? p.text)

async function withServer(fn: (s: FakeModelServer) => Promise<void>): Promise<void> {
  const s = await startModelServer()
  try {
    await fn(s)
  } finally {
    await s.close()
  }
}

for (const client of clients) {
  test(`${client}: text, thinking and usage stream in chunks`, () =>
    withServer(async (s) => {
      s.script({ thinking: 'Let me think about this.', text: 'The answer is forty two.', usage: { input: 11, output: 7 } })
      const r = await run(modelFor(s, client), { system: 'Be brief.' })
      assert.equal(r.error, undefined)
      const text = deltas(r, 'text-delta').filter((d) => d !== '')
      assert.equal(text.join(''), 'The answer is forty two.')
      assert.ok(text.length > 1, 'text arrives in several deltas')
      // The openai chat client does not read reasoning_content at all; the other two do.
      if (client !== 'openai') assert.equal(deltas(r, 'reasoning-delta').join(''), 'Let me think about this.')
      if (client === 'anthropic') assert.ok(r.parts.some((p) => p.type === 'reasoning-delta' && p.providerMetadata?.anthropic?.signature), 'the thinking block is signed')
      const step = r.parts.find((p) => p.type === 'finish-step')
      assert.equal(step.usage.inputTokens, 11)
      assert.equal(step.usage.outputTokens, 7)
      const [req] = await s.waitForModelRequests(1)
      assert.equal(req!.wire, client === 'anthropic' ? 'anthropic' : 'openai')
      assert.equal(req!.system, 'Be brief.')
      assert.equal(req!.lastUserText, 'hi')
      assert.deepEqual(req!.tools, ['get_weather'])
      assert.equal(req!.body.stream, true)
    }))

  test(`${client}: a tool call streams, and its result comes back in the next request`, () =>
    withServer(async (s) => {
      s.script({ toolCalls: [{ name: 'get_weather', args: { city: 'Paris' } }] }, { toolCalls: [{ id: 'call-own', name: 'get_weather', args: { city: 'Oslo' } }] })
      const r = await run(modelFor(s, client))
      assert.equal(r.error, undefined)
      const call = r.parts.find((p) => p.type === 'tool-call')
      assert.equal(call.toolName, 'get_weather')
      assert.deepEqual(call.input, { city: 'Paris' })
      assert.equal(call.toolCallId, client === 'anthropic' ? 'toolu_1' : 'call_1')
      assert.ok(deltas(r, 'tool-input-delta').length > 1, 'arguments arrive in several deltas')
      assert.equal(r.parts.find((p) => p.type === 'finish-step').finishReason, 'tool-calls')

      const messages: ModelMessage[] = [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'tool-call', toolCallId: call.toolCallId, toolName: 'get_weather', input: call.input }] },
        { role: 'tool', content: [{ type: 'tool-result', toolCallId: call.toolCallId, toolName: 'get_weather', output: { type: 'text', value: '42' } }] },
      ]
      const r2 = await run(modelFor(s, client), { messages })
      assert.equal(r2.parts.find((p) => p.type === 'tool-call').toolCallId, 'call-own', 'a scripted id is kept')
      assert.deepEqual(s.modelRequests[1]!.toolResults, [{ toolCallId: call.toolCallId, content: '42' }])
      assert.equal(s.modelRequests[1]!.lastUserText, 'hi')
      assert.equal(s.unconsumed, 0)
    }))

  test(`${client}: non-streaming calls get a JSON reply`, () =>
    withServer(async (s) => {
      s.script({ thinking: 'Hmm.', text: 'Hello there.', toolCalls: [{ name: 'get_weather', args: { city: 'Rome' } }], usage: { input: 5, output: 3 } })
      const r = await generateText({ model: modelFor(s, client), prompt: 'hi', tools, maxRetries: 0, maxOutputTokens: 1024 })
      assert.equal(r.text, 'Hello there.')
      if (client !== 'openai') assert.equal(r.reasoningText, 'Hmm.')
      assert.equal(r.toolCalls[0]!.toolName, 'get_weather')
      assert.deepEqual(r.toolCalls[0]!.input, { city: 'Rome' })
      assert.equal(r.usage.inputTokens, 5)
      assert.equal(r.usage.outputTokens, 3)
      assert.notEqual(s.modelRequests[0]!.body.stream, true)
    }))

  test(`${client}: errors come back in the wire's own shape`, () =>
    withServer(async (s) => {
      s.script({ error: { status: 500 } }, { error: { status: 400, kind: 'context_length' } }, { error: { status: 529, kind: 'overloaded' } })
      const server = await run(modelFor(s, client))
      assert.ok(APICallError.isInstance(server.error), String(server.error))
      assert.equal(server.error.statusCode, 500)

      const long = await run(modelFor(s, client))
      assert.ok(APICallError.isInstance(long.error))
      assert.equal(long.error.statusCode, 400)
      if (client === 'anthropic') assert.match(long.error.message, /^prompt is too long: \d+ tokens > 200000 maximum$/)
      else assert.equal((long.error.data as any).error.code, 'context_length_exceeded')

      const busy = await run(modelFor(s, client))
      assert.ok(APICallError.isInstance(busy.error))
      assert.equal(busy.error.statusCode, 529)
      assert.equal(busy.error.isRetryable, true)

      const unscripted = await run(modelFor(s, client))
      assert.ok(APICallError.isInstance(unscripted.error))
      assert.equal(unscripted.error.statusCode, 500)
      assert.match(unscripted.error.message, /no scripted reply/)

      const before = s.modelRequests.length
      const refused = await run(modelFor(s, client, 'sk-wrong'))
      assert.ok(APICallError.isInstance(refused.error))
      assert.equal(refused.error.statusCode, 401)
      assert.equal(s.modelRequests.length, before, 'a refused key is no model call')
    }))

  test(`${client}: a hung stream can be aborted, a reset one fails`, () =>
    withServer(async (s) => {
      s.script({ hang: true, text: 'Starting to answer' }, { reset: true, text: 'one two three four five six' })
      const ac = new AbortController()
      const r = await run(modelFor(s, client), { abortSignal: ac.signal, onPart: (p) => p.type === 'text-delta' && p.delta !== '' && ac.abort() })
      assert.ok(r.parts.some((p) => p.type === 'abort') || (r.error as Error)?.name === 'AbortError', 'the stream ends on abort')
      assert.equal(deltas(r, 'text-delta').join(''), 'Starting ', 'only the first chunk went out')

      const reset = await run(modelFor(s, client))
      assert.ok(reset.error, 'a dropped connection is an error')
      assert.ok(!deltas(reset, 'text-delta').join('').includes('six'), 'the reply is cut short')
    }))
}

test('scripted functions see the request, and the fallback answers once the script runs out', () =>
  withServer(async (s) => {
    s.script((req) => ({ text: `You said ${req.lastUserText}` }))
    s.fallback = { text: 'fallback' }
    const model = modelFor(s, 'anthropic')
    assert.equal(deltas(await run(model, { prompt: 'hello' }), 'text-delta').join(''), 'You said hello')
    assert.equal(deltas(await run(model), 'text-delta').join(''), 'fallback')
    assert.equal(deltas(await run(model), 'text-delta').join(''), 'fallback')
    assert.equal((await s.waitForModelRequests(3)).length, 3)
    await assert.rejects(s.waitForModelRequests(4, 50), /waited 50ms for 4 model requests, 3 arrived/)
  }))

test('close() ends a hung response', async () => {
  const s = await startModelServer()
  s.script({ hang: true })
  const res = await fetch(`${s.url}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt-fake-1', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  })
  assert.equal(res.status, 200)
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/)
  const body = res.text().then(() => 'ended', () => 'ended')
  await s.close()
  assert.equal(await body, 'ended')
})

test('GET /models still lists on both wires', () =>
  withServer(async (s) => {
    const openai = await fetch(`${s.url}/models`, { headers: { authorization: `Bearer ${s.key}` } })
    assert.deepEqual(((await openai.json()) as any).data.map((m: any) => m.id), s.models)
    const anthropic = await fetch(`${s.url}/models`, { headers: { 'x-api-key': s.key } })
    assert.equal(((await anthropic.json()) as any).has_more, false)
    assert.equal(s.modelRequests.length, 0)
  }))

const post = (s: FakeModelServer, path: string, body: object, headers: Record<string, string>) =>
  fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
const dataLines = (raw: string) => raw.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6))

test('the openai stream has the role first, [DONE] last, and usage only when asked for', () =>
  withServer(async (s) => {
    s.script({ text: 'a b' }, { text: 'a b' })
    const auth = { authorization: `Bearer ${s.key}` }
    const messages = [{ role: 'user', content: 'hi' }]
    const plain = dataLines(await (await post(s, '/chat/completions', { model: 'm', stream: true, messages }, auth)).text())
    assert.equal(plain.at(-1), '[DONE]')
    const chunks = plain.slice(0, -1).map((d) => JSON.parse(d))
    assert.equal(chunks[0].choices[0].delta.role, 'assistant')
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop')
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && !('usage' in c)))

    const counted = dataLines(await (await post(s, '/chat/completions', { model: 'm', stream: true, stream_options: { include_usage: true }, messages }, auth)).text())
    const last = JSON.parse(counted.at(-2)!)
    assert.deepEqual(last.choices, [])
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens)
  }))

test('the anthropic stream runs message_start … message_stop', () =>
  withServer(async (s) => {
    s.script({ thinking: 'hm', text: 'ok', toolCalls: [{ name: 't', args: { x: 1 } }] })
    const res = await post(s, '/messages', { model: 'm', stream: true, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }, { 'x-api-key': s.key, 'anthropic-version': '2023-06-01' })
    const events = (await res.text()).split('\n').filter((l) => l.startsWith('event: ')).map((l) => l.slice(7))
    assert.equal(events[0], 'message_start')
    assert.deepEqual(events.slice(-2), ['message_delta', 'message_stop'])
    assert.equal(events.filter((e) => e === 'content_block_start').length, 3)
    assert.equal(events.filter((e) => e === 'content_block_stop').length, 3)
  }))

test('delayMs spaces the chunks out', () =>
  withServer(async (s) => {
    s.script({ text: 'one two three four', delayMs: 40 })
    const stamps: number[] = []
    const result = streamText({ model: modelFor(s, 'compatible'), prompt: 'hi', maxRetries: 0 })
    for await (const p of result.fullStream) if (p.type === 'text-delta') stamps.push(Date.now())
    assert.equal(stamps.length, 4)
    assert.ok(stamps.at(-1)! - stamps[0]! >= 60, `deltas spread over ${stamps.at(-1)! - stamps[0]!}ms`)
  }))

test('a scripted function that throws fails that call with a 500', () =>
  withServer(async (s) => {
    s.script(() => {
      throw new Error('script bug')
    })
    const r = await run(modelFor(s, 'openai'))
    assert.ok(APICallError.isInstance(r.error))
    assert.equal(r.error.statusCode, 500)
    assert.match(r.error.message, /script bug/)
  }))
