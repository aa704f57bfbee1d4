import type { Client } from 'openapi-fetch'
import type { components, paths } from './schema.d.ts'

export type { components, paths, webhooks } from './schema.d.ts'

/** The named shapes of the description, by name: `Shape<'Session'>`. */
export type Shape<Name extends keyof components['schemas']> = components['schemas'][Name]
export type Session = Shape<'Session'>
export type Turn = Shape<'Turn'>
export type Item = Shape<'Item'>
export type Event = Shape<'Event'>
export type WebhookDelivery = Shape<'WebhookDelivery'>

export type ClientOptions = {
  /** The service's address (WARREN_PUBLIC_URL), without /v1. */
  baseUrl: string
  /** A personal access token, svc_pat_… */
  token: string
  /** Sent as X-Warren-Source: a session created through this client records it as its source. */
  source?: 'cli' | 'console'
  fetch?: (input: Request) => Promise<Response>
}

export declare function createClient(options: ClientOptions): Client<paths>
