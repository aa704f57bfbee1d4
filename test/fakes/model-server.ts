import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { anthropicWire } from './anthropic-wire.ts'
import { openaiWire } from './openai-wire.ts'

/** Which wire a request spoke, told by how it carried the key. */
export type Wire = 'openai' | 'anthropic'

export type RecordedRequest = {
  method: string
  /** Path with the query string, e.g. `/v1/models?limit=1000`. */
  url: string
  path: string
  headers: http.IncomingHttpHeaders
  body: string
  wire: Wire | null
}

export type FakeReply = {
  status: number
  body?: unknown
  headers?: Record<string, string>
  /** Written one by one instead of `body` (server-sent events); the headers go out before the first. */
  frames?: string[]
  /** Pause before each frame. */
  delayMs?: number
  /** After the frames (or with none): keep the response open until the client leaves or the server closes, or drop the socket. */
  cut?: 'hang' | 'reset'
}
/** A route answers an authorized request; `wire` says which provider dialect to answer in. */
export type FakeRoute = (req: RecordedRequest, wire: Wire) => FakeReply | Promise<FakeReply>

export type ModelServerOptions = {
  /** The one key the server accepts, on either wire. */
  key?: string
  /** What GET /models lists. */
  models?: string[]
}

/** A tool call the scripted model makes; `id` defaults to `call_<n>` (openai) or `toolu_<n>` (anthropic). */
export type ScriptedToolCall = { id?: string; name: string; args: unknown }

export type ErrorKind = 'server' | 'overloaded' | 'rate_limit' | 'context_length' | 'unauthorized'

/**
 * One model turn. A reply streams (when the request asked to) `thinking`, then `text`, then the
 * tool calls, each in several chunks, with `delayMs` before every chunk; `usage` defaults to a
 * rough estimate (a token per 4 bytes). An `error` answers with `status` and the wire's own error
 * body (`kind` defaults from the status: 401 unauthorized, 429 rate_limit, 503/529 overloaded, 5xx
 * server, else a plain invalid request). A `hang` sends the stream's opening (and the first chunk
 * of `text`) and then nothing until the client goes away or the server closes. A `reset` streams
 * part of `text` and then destroys the socket.
 */
export type ScriptStep =
  | { text?: string; thinking?: string; toolCalls?: ScriptedToolCall[]; usage?: { input: number; output: number }; delayMs?: number }
  | { error: { status: number; message?: string; kind?: ErrorKind } }
  | { hang: true; text?: string }
  | { reset: true; text?: string }

/** A step, or a function of the request that picks one (to answer by what the client sent). */
export type ScriptEntry = ScriptStep | ((req: ModelRequest) => ScriptStep | Promise<ScriptStep>)

/** A tool result found in a request's messages, the same on both wires. */
export type ToolResult = { toolCallId: string; content: string; isError?: boolean }

/** A model call as the server understood it. */
export type ModelRequest = {
  wire: Wire
  /** The parsed JSON body. */
  body: any
  model: string
  messages: unknown[]
  /** Anthropic's `system`, or the OpenAI system/developer messages, joined by blank lines. */
  system: string | null
  /** Names of the tools offered. */
  tools: string[]
  /** `isError` only appears on the anthropic wire (`is_error: true`); OpenAI has no such flag. */
  toolResults: ToolResult[]
  /** Text of the last user message that has any (tool-result-only messages are skipped). */
  lastUserText: string | null
}

/** One scripted turn, chunked once so both wires stream alike. */
export type Turn = {
  seq: number
  model: string
  thinking: string[]
  text: string[]
  toolCalls: { id: string; name: string; args: unknown; argChunks: string[] }[]
  usage: { input: number; output: number }
  /** OpenAI only sends usage when `stream_options.include_usage` asked for it. */
  includeUsage: boolean
}
export type WireError = { kind: ErrorKind | 'invalid_request' | 'not_found'; message?: string; inputTokens: number }
/** What one provider dialect needs to read a request and write replies. */
export type WireCodec = {
  toolIdPrefix: string
  parse(body: any): Omit<ModelRequest, 'wire' | 'body'>
  /** `partial` leaves out everything that closes the turn (a cut-off stream). */
  stream(turn: Turn, partial: boolean): string[]
  json(turn: Turn): unknown
  error(e: WireError): unknown
}

const BASE_PATH = '/v1'
const codecs: Record<Wire, WireCodec> = { openai: openaiWire, anthropic: anthropicWire }
const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' }

/** Words keep their trailing space so the chunks concatenate back to the text. */
const chunkText = (s: string): string[] => {
  const words = s.match(/\s*\S+\s*/g) ?? (s === '' ? [] : [s])
  // A one-word reply still streams in two pieces, so streaming stays observable.
  return words.length === 1 && s.length > 1 ? [s.slice(0, s.length >> 1), s.slice(s.length >> 1)] : words
}
const thirds = (s: string): string[] => {
  const size = Math.max(1, Math.ceil(s.length / 3))
  const out: string[] = []
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size))
  return out
}
const kindFor = (status: number): WireError['kind'] =>
  status === 401 ? 'unauthorized' : status === 429 ? 'rate_limit' : status === 503 || status === 529 ? 'overloaded' : status >= 500 ? 'server' : 'invalid_request'

/**
 * A model provider on loopback that speaks both OpenAI's and Anthropic's wire under `url`
 * (`http://127.0.0.1:PORT/v1`), refuses any other key the way each provider does, and records
 * every request. It lists models (GET /models) and answers model calls (POST /chat/completions,
 * POST /messages, streaming or not) from a script the test writes with `script()`.
 */
export class FakeModelServer {
  readonly key: string
  models: string[]
  readonly requests: RecordedRequest[] = []
  /** Every model call (either wire) in arrival order; refused keys are not model calls. */
  readonly modelRequests: ModelRequest[] = []
  /** Keyed by `METHOD /path` below the base path. */
  readonly routes = new Map<string, FakeRoute>()
  /** When set, answers every request with this instead of routing (outages, slow providers). */
  override: ((req: RecordedRequest) => FakeReply | Promise<FakeReply>) | null = null
  /** Answers model calls once the script has run out; while null those get a 500 "no scripted reply". */
  fallback: ScriptEntry | null = null
  url = ''
  #server: http.Server
  #script: ScriptEntry[] = []
  #seq = 0
  #toolIds = 0
  #closing = new AbortController()

  constructor(opts: ModelServerOptions = {}) {
    this.key = opts.key ?? 'sk-fake-0123456789abcdef'
    this.models = opts.models ?? ['gpt-fake-1', 'gpt-fake-2']
    this.routes.set('GET /models', (_req, wire) => ({ status: 200, body: this.modelList(wire) }))
    // The path decides the dialect, whichever header carried the key.
    this.routes.set('POST /chat/completions', (req) => this.#modelCall(req, 'openai'))
    this.routes.set('POST /messages', (req) => this.#modelCall(req, 'anthropic'))
    this.#server = http.createServer((req, res) => void this.#handle(req, res))
  }

  static async start(opts: ModelServerOptions = {}): Promise<FakeModelServer> {
    const s = new FakeModelServer(opts)
    await new Promise<void>((resolve) => s.#server.listen(0, '127.0.0.1', resolve))
    s.url = `http://127.0.0.1:${(s.#server.address() as AddressInfo).port}${BASE_PATH}`
    return s
  }

  /** Queues replies; each model call, on either wire, takes the oldest. */
  script(...entries: ScriptEntry[]): this {
    this.#script.push(...entries)
    return this
  }

  /** How many scripted entries no call has taken yet. */
  get unconsumed(): number {
    return this.#script.length
  }

  /** Resolves with all model calls so far once at least `n` have arrived; rejects after `ms`. */
  async waitForModelRequests(n: number, ms = 20_000): Promise<ModelRequest[]> {
    const deadline = Date.now() + ms
    while (this.modelRequests.length < n) {
      if (Date.now() >= deadline) throw new Error(`waited ${ms}ms for ${n} model requests, ${this.modelRequests.length} arrived`)
      await sleep(10)
    }
    return [...this.modelRequests]
  }

  modelList(wire: Wire): unknown {
    return wire === 'anthropic'
      ? { data: this.models.map((id) => ({ id, type: 'model', display_name: id, created_at: '2025-01-01T00:00:00Z' })), has_more: false, first_id: this.models[0] ?? null, last_id: this.models.at(-1) ?? null }
      : { object: 'list', data: this.models.map((id) => ({ id, object: 'model', created: 1_700_000_000, owned_by: 'fake' })) }
  }

  /** Which wire carried the right key, or null when none did. */
  authorize(headers: http.IncomingHttpHeaders): Wire | null {
    if (headers['x-api-key'] === this.key) return 'anthropic'
    if (headers.authorization === `Bearer ${this.key}`) return 'openai'
    return null
  }

  /** Also ends hung and slow streams: destroying the sockets closes their responses. */
  async close(): Promise<void> {
    this.#closing.abort()
    this.#server.closeAllConnections()
    await new Promise<void>((resolve) => this.#server.close(() => resolve()))
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = []
    for await (const c of req) chunks.push(c as Buffer)
    const url = req.url ?? '/'
    const path = url.split('?')[0]!
    const wire = this.authorize(req.headers)
    const rec: RecordedRequest = { method: req.method ?? 'GET', url, path, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), wire }
    this.requests.push(rec)
    const reply = await this.#route(rec).catch((err: unknown): FakeReply => ({
      // A throwing scripted function fails the call loudly instead of crashing the test process.
      status: 500,
      body: codecs[rec.wire ?? 'openai'].error({ kind: 'server', message: `fake model server: ${err instanceof Error ? err.stack : String(err)}`, inputTokens: 0 }),
    }))
    if (res.destroyed) return
    if (reply.frames === undefined && reply.cut === undefined) {
      if (reply.delayMs && (!(await this.#pause(reply.delayMs)) || res.destroyed)) return
      res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers })
      res.end(reply.body === undefined ? '' : typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body))
      return
    }
    await this.#stream(res, reply)
  }

  async #stream(res: http.ServerResponse, reply: FakeReply): Promise<void> {
    const closed = new Promise<void>((resolve) => res.once('close', resolve))
    if (reply.frames) {
      res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers })
      res.flushHeaders()
      for (const frame of reply.frames) {
        if (reply.delayMs && !(await this.#pause(reply.delayMs))) return
        if (res.destroyed) return
        res.write(frame)
      }
    }
    if (reply.cut === 'reset') res.destroy()
    else if (reply.cut === 'hang') await closed
    else res.end()
  }

  /** False when the server closed meanwhile (its sockets are gone), so no timer outlives close(). */
  async #pause(ms: number): Promise<boolean> {
    try {
      await sleep(ms, undefined, { signal: this.#closing.signal })
      return true
    } catch {
      return false
    }
  }

  async #route(rec: RecordedRequest): Promise<FakeReply> {
    if (this.override) return this.override(rec)
    const refusalWire: Wire = rec.headers['x-api-key'] !== undefined ? 'anthropic' : 'openai'
    if (!rec.wire) return { status: 401, body: unauthorized(refusalWire) }
    const route = rec.path.startsWith(BASE_PATH) ? this.routes.get(`${rec.method} ${rec.path.slice(BASE_PATH.length)}`) : undefined
    if (!route) return { status: 404, body: notFound(rec.wire, rec.path) }
    return route(rec, rec.wire)
  }

  async #modelCall(rec: RecordedRequest, wire: Wire): Promise<FakeReply> {
    const codec = codecs[wire]
    let body: any
    try {
      body = JSON.parse(rec.body)
    } catch {
      return { status: 400, body: codec.error({ kind: 'invalid_request', message: 'The request body is not valid JSON.', inputTokens: 0 }) }
    }
    const req: ModelRequest = { wire, body, ...codec.parse(body) }
    this.modelRequests.push(req)
    const entry: ScriptEntry = this.#script.shift() ?? this.fallback ?? {
      error: { status: 500, kind: 'server', message: `no scripted reply for model call #${this.modelRequests.length} (${wire}, model ${req.model}); script one with server.script(...)` },
    }
    const step = typeof entry === 'function' ? await entry(req) : entry
    return this.#answer(step, req, codec, rec.body.length)
  }

  #answer(step: ScriptStep, req: ModelRequest, codec: WireCodec, bodyBytes: number): FakeReply {
    const inputTokens = Math.max(1, Math.ceil(bodyBytes / 4))
    if ('error' in step) {
      const { status, message, kind } = step.error
      return { status, body: codec.error({ kind: kind ?? kindFor(status), message, inputTokens }) }
    }
    const streaming = req.body?.stream === true
    if ('hang' in step || 'reset' in step) {
      const turn = this.#turn({ text: step.text }, req, codec, inputTokens)
      const hang = 'hang' in step
      if (!streaming) {
        // A non-streaming reply is one body: hang before it, or cut it in half.
        const json = JSON.stringify(codec.json(turn))
        return hang ? { status: 200, cut: 'hang' } : { status: 200, frames: [json.slice(0, json.length >> 1)], cut: 'reset' }
      }
      turn.text = turn.text.slice(0, hang ? 1 : Math.max(1, turn.text.length >> 1))
      return { status: 200, headers: SSE_HEADERS, frames: codec.stream(turn, true), cut: hang ? 'hang' : 'reset' }
    }
    const turn = this.#turn(step, req, codec, inputTokens)
    return streaming
      ? { status: 200, headers: SSE_HEADERS, frames: codec.stream(turn, false), delayMs: step.delayMs }
      : { status: 200, body: codec.json(turn), delayMs: step.delayMs }
  }

  #turn(step: Exclude<ScriptStep, { error: unknown } | { hang: true } | { reset: true }>, req: ModelRequest, codec: WireCodec, inputTokens: number): Turn {
    const toolCalls = (step.toolCalls ?? []).map((c) => {
      const args = c.args ?? {}
      return { id: c.id ?? `${codec.toolIdPrefix}${++this.#toolIds}`, name: c.name, args, argChunks: thirds(JSON.stringify(args)) }
    })
    const outBytes = (step.text ?? '').length + (step.thinking ?? '').length + toolCalls.reduce((n, c) => n + c.argChunks.join('').length, 0)
    return {
      seq: ++this.#seq,
      model: req.model,
      thinking: chunkText(step.thinking ?? ''),
      text: chunkText(step.text ?? ''),
      toolCalls,
      usage: step.usage ?? { input: inputTokens, output: Math.max(1, Math.ceil(outBytes / 4)) },
      includeUsage: req.body?.stream_options?.include_usage === true,
    }
  }
}

const unauthorized = (wire: Wire) => codecs[wire].error({ kind: 'unauthorized', inputTokens: 0 })

const notFound = (wire: Wire, path: string) =>
  codecs[wire].error({ kind: 'not_found', message: wire === 'anthropic' ? `Not found: ${path}` : `Unknown request URL: ${path}`, inputTokens: 0 })

/** Starts a fake provider; the caller closes it (`after(() => server.close())`). */
export const startModelServer = (opts: ModelServerOptions = {}) => FakeModelServer.start(opts)
