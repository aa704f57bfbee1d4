import http from 'node:http'
import type { AddressInfo } from 'node:net'

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

export type FakeReply = { status: number; body?: unknown; headers?: Record<string, string> }
/** A route answers an authorized request; `wire` says which provider dialect to answer in. */
export type FakeRoute = (req: RecordedRequest, wire: Wire) => FakeReply | Promise<FakeReply>

export type ModelServerOptions = {
  /** The one key the server accepts, on either wire. */
  key?: string
  /** What GET /models lists. */
  models?: string[]
}

const BASE_PATH = '/v1'

/**
 * A model provider on loopback that speaks both OpenAI's and Anthropic's wire under `url`
 * (`http://127.0.0.1:PORT/v1`), refuses any other key the way each provider does, and records
 * every request. Routes are a table so that later tests can add chat completions and messages.
 */
export class FakeModelServer {
  readonly key: string
  models: string[]
  readonly requests: RecordedRequest[] = []
  /** Keyed by `METHOD /path` below the base path. */
  readonly routes = new Map<string, FakeRoute>()
  /** When set, answers every request with this instead of routing (outages, slow providers). */
  override: ((req: RecordedRequest) => FakeReply | Promise<FakeReply>) | null = null
  url = ''
  #server: http.Server

  constructor(opts: ModelServerOptions = {}) {
    this.key = opts.key ?? 'sk-fake-0123456789abcdef'
    this.models = opts.models ?? ['gpt-fake-1', 'gpt-fake-2']
    this.routes.set('GET /models', (_req, wire) => ({ status: 200, body: this.modelList(wire) }))
    this.#server = http.createServer((req, res) => void this.#handle(req, res))
  }

  static async start(opts: ModelServerOptions = {}): Promise<FakeModelServer> {
    const s = new FakeModelServer(opts)
    await new Promise<void>((resolve) => s.#server.listen(0, '127.0.0.1', resolve))
    s.url = `http://127.0.0.1:${(s.#server.address() as AddressInfo).port}${BASE_PATH}`
    return s
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

  async close(): Promise<void> {
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
    const reply = await this.#route(rec)
    if (res.destroyed) return
    res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers })
    res.end(reply.body === undefined ? '' : typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body))
  }

  async #route(rec: RecordedRequest): Promise<FakeReply> {
    if (this.override) return this.override(rec)
    const refusalWire: Wire = rec.headers['x-api-key'] !== undefined ? 'anthropic' : 'openai'
    if (!rec.wire) return { status: 401, body: unauthorized(refusalWire) }
    const route = rec.path.startsWith(BASE_PATH) ? this.routes.get(`${rec.method} ${rec.path.slice(BASE_PATH.length)}`) : undefined
    if (!route) return { status: 404, body: notFound(rec.wire, rec.path) }
    return route(rec, rec.wire)
  }
}

const unauthorized = (wire: Wire) =>
  wire === 'anthropic'
    ? { type: 'error', error: { type: 'authentication_error', message: 'invalid x-api-key' } }
    : { error: { message: 'Incorrect API key provided.', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } }

const notFound = (wire: Wire, path: string) =>
  wire === 'anthropic'
    ? { type: 'error', error: { type: 'not_found_error', message: `Not found: ${path}` } }
    : { error: { message: `Unknown request URL: ${path}`, type: 'invalid_request_error', param: null, code: 'unknown_url' } }

/** Starts a fake provider; the caller closes it (`after(() => server.close())`). */
export const startModelServer = (opts: ModelServerOptions = {}) => FakeModelServer.start(opts)
