import { EVENTS, type EventName, type WebhookEventName } from './events.schema.ts'

/*
 * The published vocabulary, derived from the event schemas (events.schema.ts says how each event
 * leaves the service). Internal events (session.created, session.working, …) drive webhooks and
 * never leave the service on a stream or as an item.
 */

type Exit = { item?: string; live?: true; as?: string; webhook?: true }
const exits = Object.entries(EVENTS) as [EventName, Exit][]

/** The published event vocabulary (an allowlist) and the item type each event is recorded under. */
type Published = { persisted: boolean; item?: string }
export const PUBLISHED_EVENTS: Record<string, Published> = Object.fromEntries(
  exits.flatMap(([name, e]): [string, Published][] => (e.item !== undefined ? [[name, { persisted: true, item: e.item }]] : e.live ? [[name, { persisted: false }]] : [])),
)

/** Internal names that differ from their published name. Everything else is published as itself. */
const PUBLIC_NAME: Record<string, string> = Object.fromEntries(exits.flatMap(([name, e]) => (e.as !== undefined ? [[name, e.as]] : [])))

/** The published name of an internal event, or null when the event is internal only. */
export function publicName(internalType: string): string | null {
  const name = PUBLIC_NAME[internalType] ?? internalType
  return PUBLISHED_EVENTS[name] ? name : null
}

export const PERSISTED_PUBLIC_TYPES = Object.keys(PUBLISHED_EVENTS).filter((k) => PUBLISHED_EVENTS[k]!.persisted)

/** Internal types stored in the log whose published name is persisted: what items and replays read. */
export function persistedInternalTypes(): string[] {
  return [...PERSISTED_PUBLIC_TYPES, ...Object.keys(PUBLIC_NAME).filter((k) => PUBLISHED_EVENTS[PUBLIC_NAME[k]!]?.persisted)]
}

export const WEBHOOK_EVENT_TYPES: readonly WebhookEventName[] = exits.flatMap(([name, e]) => (e.webhook ? [name as WebhookEventName] : []))
export type WebhookEventType = WebhookEventName
