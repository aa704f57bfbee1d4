import { ApiError } from '../errors.ts'
import type { PrivatePolicy } from '../shared/address-policy.ts'
import { hostRefusal } from '../shared/guarded-lookup.ts'

/**
 * Refuses a subscription URL that is not https, or whose host is an address literal the address
 * policy refuses under `allowPrivate` (WARREN_ALLOW_PRIVATE_WEBHOOKS's CIDRs) or a localhost name.
 * Host names are not resolved here: DNS can change after subscribing, so the worker checks
 * resolved addresses.
 */
export function checkWebhookUrl(raw: string, allowPrivate: PrivatePolicy): void {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ApiError('invalid_request', `url "${raw}" is not an absolute URL.`)
  }
  if (url.protocol !== 'https:') throw new ApiError('invalid_request', `url must use https, not "${url.protocol.replace(/:$/, '')}".`)
  // The URL parser has already normalised 2130706433, 0x7f.1 and friends to dotted IPv4.
  const why = hostRefusal(url.hostname, allowPrivate)
  if (why) {
    const host = url.hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase()
    throw new ApiError('invalid_request', `url host "${host}" is ${why}: deliveries to loopback, private and link-local addresses are refused unless the deployment lists them in WARREN_ALLOW_PRIVATE_WEBHOOKS.`)
  }
}
