import type { Config } from '../config.ts'
import { NETWORK_TOOL_TYPES, type ToolEntry } from './tools.schema.ts'

/** The network tools a session gets when it names none: every type the deployment has not turned off. */
export function defaultToolEntries(config: Pick<Config, 'disabledTools'>): ToolEntry[] {
  return NETWORK_TOOL_TYPES.filter((t) => !config.disabledTools.includes(t)).map((type) => ({ type }))
}
