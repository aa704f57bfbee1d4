import type { PrivatePolicy } from '../shared/address-policy.ts'
import { guardedFetch as policyFetch, type GuardedFetch } from '../shared/guarded-fetch.ts'

export type { GuardedFetch }

export const MCP_REFUSED = 'MCP servers at loopback, private and link-local addresses are refused unless the deployment lists them in WARREN_ALLOW_PRIVATE_MCP'

/** The fetch the MCP client transports are given: the outbound policy's, under WARREN_ALLOW_PRIVATE_MCP. */
export function guardedFetch(opts: { allowPrivate: PrivatePolicy }): GuardedFetch {
  return policyFetch({ allowPrivate: opts.allowPrivate, refused: MCP_REFUSED, what: 'MCP servers' })
}
