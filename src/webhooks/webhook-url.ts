import { isIP } from 'node:net'
import { ApiError } from '../errors.ts'
import { classifyAddress } from '../shared/address-policy.ts'

const isLocalhostName = (host: string): boolean => host === 'localhost' || host.endsWith('.localhost')

/**
 * Refuses a subscription URL that is not https, or (unless private targets are allowed) whose host
 * is an address literal the address policy refuses or a localhost name. Host names are not
 * resolved here: DNS can change after subscribing, so the worker checks resolved addresses.
 */
export function checkWebhookUrl(raw: string, allowPrivate: boolean): void {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ApiError('invalid_request', `url "${raw}" is not an absolute URL.`)
  }
  if (url.protocol !== 'https:') throw new ApiError('invalid_request', `url must use https, not "${url.protocol.replace(/:$/, '')}".`)
  if (allowPrivate) return
  // The URL parser has already normalised 2130706433, 0x7f.1 and friends to dotted IPv4.
  const host = url.hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase()
  const why = isLocalhostName(host) ? 'a loopback name' : isIP(host) ? classifyAddress(host)?.kind : null
  if (why) {
    throw new ApiError(
      'invalid_request',
      `url host "${host}" is ${why}: deliveries to loopback, private and link-local addresses are refused unless the deployment sets WARREN_ALLOW_PRIVATE_WEBHOOKS.`,
    )
  }
}
