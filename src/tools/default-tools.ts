import type { Config } from '../config.ts'
import { NETWORK_TOOL_TYPES, type ToolEntry } from './tools.schema.ts'
import { unavailableNetworkTools } from './network/index.ts'

/**
 * The network tools a session gets when it names none: every type this deployment offers, the
 * same set start-up reports (less what WARREN_DISABLED_TOOLS turned off and what the host cannot
 * run), so a session never lists a tool the model will not be given.
 */
export function defaultToolEntries(config: Pick<Config, 'disabledTools' | 'searchUrl'>): ToolEntry[] {
  const unavailable = unavailableNetworkTools(config)
  return NETWORK_TOOL_TYPES.filter((t) => !unavailable.has(t)).map((type) => ({ type }))
}
