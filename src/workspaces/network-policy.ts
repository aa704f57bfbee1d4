import type { Config } from '../config.ts'
import type { PermissionRule } from '../sessions/sessions.schema.ts'
import type { NetworkPolicy } from '../sandbox/sandbox.ts'
import { globMatch } from '../shared/glob.ts'

/**
 * The domains a workspace may reach: the deployment's default list plus the session's own
 * `allow` rules with a domain. A `deny` rule's domain beats them: entries it matches are dropped
 * (so a deny of `**` leaves no network at all), and the proxy refuses any host it matches even
 * when a broader allow glob would let it through.
 */
export function networkPolicyFor(config: Pick<Config, 'sandboxAllowedDomains'>, rules: PermissionRule[]): NetworkPolicy {
  const allowed = new Set(config.sandboxAllowedDomains)
  for (const r of rules) if (r.decision === 'allow' && r.domain) allowed.add(r.domain.toLowerCase())
  const denied = rules.filter((r) => r.decision === 'deny' && r.domain).map((r) => r.domain!.toLowerCase())
  return { allow: [...allowed].filter((d) => !denied.some((g) => g === d || globMatch(g, d, '.', true))), deny: denied }
}
