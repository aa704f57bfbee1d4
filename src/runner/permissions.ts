import type { PermissionRule } from '../sessions/sessions.schema.ts'
import { globMatch } from '../shared/glob.ts'

export type ApprovalMode = 'auto' | 'ask' | 'read_only'

/** What a call touches, as rules see it: the tool's name and, where it has them, a path, a command, a domain. */
export type CallSubject = { tool: string; writes: boolean; path?: string; command?: string; domain?: string }

export type Decision =
  | { decision: 'allow' }
  | { decision: 'ask' }
  | { decision: 'deny'; code: 'denied_by_rule' | 'denied_read_only'; reason: string }

// Commands have no segments a `*` should stop at: `rm *` is meant to cover `rm -rf /tmp/x`.
const NO_SEPARATOR = '\u0000'

function matches(rule: PermissionRule, s: CallSubject): boolean {
  const given = (['tool', 'path', 'command', 'domain'] as const).filter((k) => rule[k] !== undefined)
  if (given.length === 0) return false
  return given.every((k) => {
    const value = s[k]
    if (value === undefined) return false
    if (k === 'command') return globMatch(rule.command!, value, NO_SEPARATOR)
    if (k === 'domain') return globMatch(rule.domain!, value.toLowerCase(), '.', true)
    return globMatch(rule[k]!, value)
  })
}

const describe = (r: PermissionRule) =>
  (['tool', 'path', 'command', 'domain'] as const)
    .filter((k) => r[k] !== undefined)
    .map((k) => `${k} "${r[k]}"`)
    .join(', ')

/**
 * Decides one call (decisions §3): the matching rules first, `deny` beating `ask` beating
 * `allow`; with no matching rule, the approval mode: `auto` runs everything, `ask` asks before
 * every writing tool, `read_only` refuses writing tools (whatever the allow rules say: the mode is
 * the session's ceiling).
 */
export function decide(subject: CallSubject, mode: ApprovalMode, rules: PermissionRule[]): Decision {
  const hits = rules.filter((r) => matches(r, subject))
  const deny = hits.find((r) => r.decision === 'deny')
  if (deny) return { decision: 'deny', code: 'denied_by_rule', reason: `The call to ${subject.tool} is refused by the session's permission rule (${describe(deny)}).` }
  // read_only is a ceiling, not a default: no allow rule lifts it.
  if (subject.writes && mode === 'read_only') return { decision: 'deny', code: 'denied_read_only', reason: `The session is read-only: ${subject.tool} changes the workspace and is refused.` }
  if (hits.some((r) => r.decision === 'ask')) return { decision: 'ask' }
  if (hits.some((r) => r.decision === 'allow')) return { decision: 'allow' }
  if (!subject.writes) return { decision: 'allow' }
  if (mode === 'ask') return { decision: 'ask' }
  return { decision: 'allow' }
}
