import { randomBytes } from 'node:crypto'
import type { Deps } from '../deps.ts'
import { lockKey } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import { checkWebhookUrl } from './webhook-url.ts'
import type { CreateWebhookBody } from './webhooks.schema.ts'
import { eventsKey, findIdenticalSubscription, insertSubscription, type SubscriptionRow } from './webhooks.store.ts'

export const SECRET_PREFIX = 'whsec_'

/**
 * Subscribes after the url passes the https and private-address checks. The secret is returned
 * here once; only its sealed form is kept, because deliveries must sign with it later.
 */
export async function createSubscription(
  deps: Pick<Deps, 'store' | 'box' | 'config'>,
  orgId: string,
  body: CreateWebhookBody,
): Promise<{ row: SubscriptionRow; secret: string }> {
  const { store, box, config } = deps
  checkWebhookUrl(body.url, config.allowPrivateWebhooks)
  const secret = SECRET_PREFIX + randomBytes(32).toString('base64url')
  const row = await store.db.transaction().execute(async (trx) => {
    // Two identical requests racing must not both pass the duplicate check.
    await lockKey(trx, store.dialect, `webhooks:${orgId}`)
    const existing = await findIdenticalSubscription(trx, orgId, body.url, eventsKey(body.events))
    if (existing) {
      throw new ApiError('conflict', `Subscription ${existing} already delivers the same event set to this url; delete it first or use a different event set.`)
    }
    return insertSubscription(trx, { orgId, url: body.url, events: body.events, secretEnc: box.seal(secret) })
  })
  return { row, secret }
}
