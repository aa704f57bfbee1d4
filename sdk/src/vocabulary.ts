// The published event vocabulary, typed from the description (components.schemas.Event, a union
// on `type`): a consumer branching on `type` gets the right payload.
import type { components } from './schema.ts'

/** One event as a stream frame's data carries it: `switch (e.type)` narrows `payload`. */
export type WarrenEvent = Exclude<components['schemas']['Event'], { type: 'service.replay_truncated' }>

export type EventType = WarrenEvent['type']

/** Each event's payload, by name. */
export type EventPayloads = { [E in WarrenEvent as E['type']]: E['payload'] }
