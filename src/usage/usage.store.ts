import type { Db } from '../db/database.ts'

export type UsageTotals = { sandboxMs: number; chargeableMs: number; needsReview: number; intervals: number }

/**
 * Sums a session's billable intervals up to `asOf`: an open interval counts until then, an
 * interval whose end was lost is counted apart (needs review) and not summed.
 */
export async function sumUsage(db: Db, sessionIds: string[], asOf: number): Promise<UsageTotals> {
  const rows = await db.selectFrom('usage_intervals').selectAll().where('session_id', 'in', sessionIds).where('billable', '=', 1).execute()
  const totals: UsageTotals = { sandboxMs: 0, chargeableMs: 0, needsReview: 0, intervals: rows.length }
  for (const r of rows) {
    if (r.needs_review) {
      totals.needsReview++
      continue
    }
    const end = r.ended_at === null ? asOf : Math.min(Number(r.ended_at), asOf)
    const ms = Math.max(0, end - Number(r.started_at))
    totals.sandboxMs += ms
    if (r.reconciled && r.ended_at !== null) totals.chargeableMs += ms
  }
  return totals
}
