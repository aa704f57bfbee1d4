// Warren's typed client: every operation from the OpenAPI description (generated into schema.ts),
// plus what a generator cannot write: resumable event streams, retries that are safe, and webhook
// signature checks.
export { createWarren, ok, type Warren, type WarrenOptions } from './client.ts'
export { WarrenError, type ErrorBody } from './errors.ts'
export { streamEvents, type StreamOptions } from './events.ts'
export { retryingFetch, type RetryOptions } from './retry.ts'
export { verifyWebhook, WebhookVerificationError, type WebhookDelivery, type VerifyOptions } from './webhooks.ts'
export type { EventPayloads, EventType, WarrenEvent } from './vocabulary.ts'
export type { paths, components, operations } from './schema.ts'
