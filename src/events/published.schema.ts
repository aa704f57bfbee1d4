import { Type, type TObject, type TSchema } from 'typebox'
import { EVENTS, type EventName } from './events.schema.ts'
import { PUBLISHED_EVENTS, publicName } from './vocabulary.ts'

/*
 * What clients see of the events, for the OpenAPI description: an item's `detail` and a stream
 * frame's `data`, each a union with one branch per internal event that is published (so
 * agent.error has two: a run's failure and session.error's seed problem).
 */

const about = (e: { payload: TObject }) => (e.payload as { description?: string }).description ?? ''

const published = (Object.keys(EVENTS) as EventName[]).flatMap((type) => {
  const name = publicName(type)
  return name === null ? [] : [{ type, name, persisted: PUBLISHED_EVENTS[name]!.persisted, payload: EVENTS[type].payload as TObject }]
})
type Published = (typeof published)[number]

/** agent.text → AgentText: the stem of the names the OpenAPI description gives an event's shapes. */
const stem = (name: string) => name.replace(/(^|[._])([a-z])/g, (_, _s: string, c: string) => c.toUpperCase())

/**
 * One branch per published name, named `{Stem}{suffix}`: a name published from two internal
 * events (agent.error) is itself a union of the two, as a discriminator's mapping takes one
 * schema a value.
 */
function branches(events: Published[], suffix: string, shape: (e: Published) => TObject): TSchema[] {
  const names = [...new Set(events.map((e) => e.name))]
  return names.map((name) => {
    const group = events.filter((e) => e.name === name)
    const $id = `${stem(name)}${suffix}`
    if (group.length === 1) return { ...shape(group[0]!), $id }
    return Type.Union(group.map(shape), { $id, description: `${name}, from ${group.length} sources: ${group.map((e) => e.type).join(', ')}.` })
  })
}

/**
 * Each event's payload, named (AgentTextPayload …): a frame's `payload`. A copy, so the schema
 * recording is typed and checked by (events.schema.ts) carries no name of the description's.
 */
const payloadOf = (e: Published) => ({ ...e.payload, $id: `${stem(e.type)}Payload` })

/**
 * An item's `detail`: `event`, the published name, then that event's payload fields. Unsafe only
 * to add `discriminator` (http/openapi.ts maps each value to its branch), which Union takes no
 * option for; this schema describes, the route serializes Item's open `detail`.
 */
export const ItemDetail = Type.Unsafe({
  ...Type.Union(
    branches(
      published.filter((e) => e.persisted),
      'Detail',
      (e) =>
        Type.Object(
          { event: Type.Literal(e.name), ...e.payload.properties },
          { additionalProperties: false, description: `${e.name}${e.type === e.name ? '' : ` (recorded as ${e.type})`}: ${about(e)}` },
        ),
    ),
    { $id: 'ItemDetail', description: 'detail.event is the event name; the rest is that event’s payload. Branch on detail.event.' },
  ),
  discriminator: { propertyName: 'event' },
})

/** Sent when a replay stopped at its ceiling (rule 3); not persisted, no `id:` line. */
const ReplayTruncated = Type.Object(
  {
    object: Type.Literal('event'),
    type: Type.Literal('service.replay_truncated'),
    seq: Type.Null(),
    from_seq: Type.Integer({ description: 'Reconnect with this as the cursor to collect the rest.' }),
    note: Type.String(),
  },
  { $id: 'ServiceReplayTruncatedEvent', additionalProperties: false, description: 'service.replay_truncated: the replay stopped at its ceiling; live frames follow.' },
)

/** The JSON of a frame's `data:` line, one branch per published event (its `event:` name is `type`). */
export const EventFrameData = Type.Unsafe({
  ...Type.Union(
    [
      ...branches(published, 'Event', (e) =>
        Type.Object(
          {
            object: Type.Literal('event'),
            type: Type.Literal(e.name),
            internal_type: Type.Literal(e.type, { description: "The service's own name, for reporting a problem." }),
            session_id: Type.String(),
            seq: e.persisted ? Type.Integer({ description: 'Also the frame’s id: line.' }) : Type.Null({ description: 'Live only: no id: line, never replayed.' }),
            created_at: Type.Integer(),
            payload: payloadOf(e),
          },
          { additionalProperties: false, description: `${e.name}: ${about(e)}` },
        ),
      ),
      ReplayTruncated,
    ],
    { $id: 'Event', description: 'The data: line of a frame; its event: line is the same as type.' },
  ),
  discriminator: { propertyName: 'type' },
})
