import { Type, type Static } from 'typebox'
import { WEBHOOK_EVENT_TYPES } from '../events/vocabulary.ts'
import { PlainListQuery } from '../http/pagination.ts'

export const WebhookEventType = Type.Enum([...WEBHOOK_EVENT_TYPES], { description: 'A webhook event type.' })

export const CreateWebhookBody = Type.Object(
  {
    url: Type.String({
      minLength: 1,
      maxLength: 2048,
      description:
        'Must be https. A host that is a loopback, private or link-local address, or a localhost name, is refused unless its address lies in a CIDR the deployment lists in WARREN_ALLOW_PRIVATE_WEBHOOKS (a cloud metadata address or the host\'s own only when listed exactly, as a /32 or /128); each delivery judges again every address a name resolves to.',
    }),
    events: Type.Array(WebhookEventType, {
      minItems: 1,
      uniqueItems: true,
      description: 'The event types to deliver, each at most once. Order does not matter: the same url with the same set is a duplicate.',
    }),
  },
  { $id: 'CreateWebhookRequest', additionalProperties: false },
)
export type CreateWebhookBody = Static<typeof CreateWebhookBody>

export const DeliveryStats = Type.Object(
  {
    pending: Type.Integer({ description: 'Deliveries not yet answered 2xx and still being retried.' }),
    dead: Type.Integer({ description: 'Deliveries that failed all six attempts.' }),
    last_error: Type.Union([Type.String(), Type.Null()], { description: 'Why the most recent failed attempt failed; null when no attempt has failed.' }),
    last_failed_at: Type.Union([Type.Integer(), Type.Null()], { description: 'Unix ms of the most recent failed attempt; null when no attempt has failed.' }),
  },
  { $id: 'WebhookDeliveryStats', additionalProperties: false, description: 'Counts over the deliveries still recorded for this subscription. Both last_* fields are always present and null together.' },
)
export type DeliveryStats = Static<typeof DeliveryStats>

export const WebhookSubscription = Type.Object(
  {
    object: Type.Literal('webhook.subscription'),
    id: Type.String(),
    url: Type.String({ description: 'As sent at creation.' }),
    events: Type.Array(WebhookEventType, { description: 'In the order sent at creation.' }),
    active: Type.Boolean(),
    created_at: Type.Integer({ description: 'Unix ms' }),
    secret: Type.Optional(
      Type.String({ description: 'whsec_…, the HMAC-SHA256 key that signs deliveries. Returned by the create call only, once; listings and reads omit it.' }),
    ),
    delivery: DeliveryStats,
  },
  { $id: 'Webhook', additionalProperties: false },
)
export type WebhookSubscription = Static<typeof WebhookSubscription>

export const WebhookDeleted = Type.Object(
  { object: Type.Literal('webhook.subscription.deleted'), id: Type.String(), deleted: Type.Boolean() },
  { $id: 'WebhookDeleted', additionalProperties: false, description: 'The subscription is gone, and so are its deliveries: nothing more is sent to it.' },
)

export const WebhookParams = Type.Object({ webhook_id: Type.String() }, { additionalProperties: false })

export const ListWebhooksQuery = Type.Object(PlainListQuery, { additionalProperties: false })

/**
 * The body of a delivery (delivery-body.ts writes it): `data` names the objects concerned and
 * never embeds them; the receiver reads them afterwards.
 */
export const WebhookDelivery = Type.Object(
  {
    object: Type.Literal('event'),
    type: WebhookEventType,
    created_at: Type.Integer({ description: 'Unix ms' }),
    data: Type.Object(
      {
        session_id: Type.String(),
        turn_id: Type.Optional(Type.String({ description: 'When the event concerns a turn.' })),
        required_action: Type.Optional(Type.Object({ type: Type.Literal('function_call') }, { additionalProperties: false, description: 'session.action_required only: the kind of action; read the session for the rest.' })),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, $id: 'WebhookDelivery', description: 'A signed POST to the subscription url, one per event and subscription.' },
)
export type WebhookDelivery = Static<typeof WebhookDelivery>
