import createClient, { type Client } from 'openapi-fetch'
import { WarrenError } from './errors.ts'
import { streamEvents, type StreamOptions } from './events.ts'
import { retryingFetch, type RetryOptions } from './retry.ts'
import type { paths } from './schema.ts'
import type { WarrenEvent } from './vocabulary.ts'

export type WarrenOptions = RetryOptions & {
  /** The service's address, e.g. `http://127.0.0.1:8080` (without `/v1`). */
  baseUrl: string
  /** A personal access token (`svc_pat_…`). */
  token: string
  /** Sent as `X-Warren-Source`: sessions created through this client record it (`cli`, `console`). */
  source?: 'cli' | 'console'
  /** The fetch to send with (defaults to the global one). */
  fetch?: typeof fetch
}

export type Warren = {
  /** Every operation of the description, typed by path and method (openapi-fetch). */
  api: Client<paths>
  /** A session's (or the organization's) events, resumed across lost connections. */
  events(opts?: StreamOptions): AsyncGenerator<WarrenEvent, void, undefined>
}

export function createWarren(opts: WarrenOptions): Warren {
  const baseUrl = opts.baseUrl.replace(/\/+$/, '')
  const headers: Record<string, string> = { authorization: `Bearer ${opts.token}` }
  if (opts.source) headers['x-warren-source'] = opts.source
  const send = retryingFetch(opts.fetch ?? globalThis.fetch, opts)
  return {
    api: createClient<paths>({ baseUrl, headers, fetch: send }),
    // Streams reconnect on their own, so they are sent once a connection, not through the retries.
    // The global fetch is called unbound (a browser refuses it as a method of another object: "Illegal invocation").
    events: (o) => streamEvents({ baseUrl, headers, fetch: opts.fetch ?? ((input, init) => globalThis.fetch(input, init)) }, o),
  }
}

type Answer<T> = { data?: T; error?: unknown; response: Response }

/** The data of an answer, or a WarrenError for a refusal: `const s = await ok(warren.api.GET(…))`. */
export async function ok<T>(call: Promise<Answer<T>>): Promise<T> {
  const { data, error, response } = await call
  if (error !== undefined || !response.ok) throw await WarrenError.from(response, error)
  return data as T
}
