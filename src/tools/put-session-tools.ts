import type { Deps } from '../deps.ts'
import { withEvents } from '../events/record-event.ts'
import { requireSession } from '../sessions/require-session.ts'
import { setSessionTools, storedAgentOf } from '../sessions/sessions.store.ts'
import { redactToolEntry, sealToolEntries } from './tool-entries.ts'
import type { ToolEntry } from './tools.schema.ts'

/**
 * Replaces a session's tool configuration and records `session.tools_updated`, in one
 * transaction; a running turn reads it at its next model step. Returns the entries as a GET shows
 * them: credentials withheld.
 */
export async function putSessionTools(deps: Pick<Deps, 'store' | 'bus' | 'box'>, orgId: string, sessionId: string, tools: ToolEntry[]): Promise<ReturnType<typeof redactToolEntry>[]> {
  const { store, bus, box } = deps
  return withEvents(store, bus, async (trx, record) => {
    const row = await requireSession(trx, orgId, sessionId)
    // Credentials a GET withheld and a PUT sends back as `redacted` are kept from what is replaced.
    const sealed = sealToolEntries(box, tools, 'tools', storedAgentOf(row).tools)
    const shown = sealed.map(redactToolEntry)
    await setSessionTools(trx, row, sealed, Date.now())
    // Internal vocabulary: it drives nothing outside, but the log says when the tools changed.
    await record({ orgId, sessionId: row.id, type: 'session.tools_updated', payload: { tools: shown } })
    return shown
  })
}
