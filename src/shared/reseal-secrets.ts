import type { Db, Store } from '../db/database.ts'
import { sealToolEntries, type StoredToolEntry } from '../tools/tool-entries.ts'
import type { ToolEntry } from '../tools/tools.schema.ts'
import type { SecretBox } from './secret-box.ts'

export type ResealReport = { resealed: number; unreadable: number; by_table: Record<string, number> }

/** A column holding sealed values: how its rows are named, and how one value is rewritten (null: unchanged). */
type SealedColumn = { table: string; keys: string[]; column: string; rewrite(value: string): { next: string; count: number } | null }

/**
 * Opens every secret the store holds sealed (with the current key or the previous one) and seals
 * it again under the current key, row by row, so that the previous key can then be dropped. MCP
 * credentials stored in plain text by an early version are sealed on the way. A value neither key
 * opens is left as it is and counted; nothing is ever written in plain text. Safe beside a running
 * service: a row is written only if it still holds what was read (else it is read again).
 */
export async function resealSecrets(store: Store, box: SecretBox): Promise<ResealReport> {
  const report: ResealReport = { resealed: 0, unreadable: 0, by_table: {} }
  const reseal = (value: string): string | null => {
    try {
      return box.seal(box.open(value))
    } catch {
      report.unreadable++
      return null
    }
  }
  const one = (value: string) => {
    const next = reseal(value)
    return next === null ? null : { next, count: 1 }
  }
  /** The MCP entries of a JSON text of tool entries (or of an agent holding them), sealed again. */
  const tools = (inAgent: boolean) => (text: string) => {
    const parsed = JSON.parse(text) as { tools?: unknown } | unknown[] | null
    const list = (inAgent ? (parsed as { tools?: unknown } | null)?.tools : parsed) as (StoredToolEntry & { authorization?: string; headers?: object; env?: object })[] | null
    if (!Array.isArray(list)) return null
    let count = 0
    list.forEach((t, i) => {
      if (t?.type !== 'mcp') return
      if (typeof t.secrets_enc === 'string') {
        const next = reseal(t.secrets_enc)
        if (next !== null) (t.secrets_enc = next), count++
      } else if (t.authorization !== undefined || t.headers !== undefined || t.env !== undefined) {
        list[i] = sealToolEntries(box, [t as unknown as ToolEntry], 'tools')[0]!
        count++
      }
    })
    return count ? { next: JSON.stringify(parsed), count } : null
  }
  const columns: SealedColumn[] = [
    { table: 'model_credentials', keys: ['id'], column: 'api_key_enc', rewrite: one },
    { table: 'webhook_subscriptions', keys: ['id'], column: 'secret_enc', rewrite: one },
    { table: 'environment_profiles', keys: ['id'], column: 'env_enc', rewrite: one },
    { table: 'idempotency_keys', keys: ['token_id', 'key'], column: 'body', rewrite: one },
    { table: 'agents', keys: ['id'], column: 'tools', rewrite: tools(false) },
    { table: 'sessions', keys: ['id'], column: 'agent', rewrite: tools(true) },
    // A node running meanwhile keeps its secret: only the way it is sealed changes.
    { table: 'nodes', keys: ['id'], column: 'secret', rewrite: one },
  ]
  for (const c of columns) {
    const n = await resealColumn(store.db, c)
    report.resealed += n
    if (n) report.by_table[c.table] = n
  }
  return report
}

async function resealColumn(db: Db, c: SealedColumn): Promise<number> {
  const q = db as unknown as Db & { selectFrom(t: string): any; updateTable(t: string): any }
  const where = (b: any, row: Record<string, unknown>) => c.keys.reduce((acc, k) => acc.where(k, '=', row[k]), b)
  let total = 0
  for (let row of (await q.selectFrom(c.table).select([...c.keys, c.column]).where(c.column, 'is not', null).execute()) as Record<string, string>[]) {
    for (let attempt = 0; attempt < 5 && row; attempt++) {
      const r = c.rewrite(row[c.column]!)
      if (!r) break
      const res = await where(q.updateTable(c.table).set({ [c.column]: r.next }), row).where(c.column, '=', row[c.column]).executeTakeFirst()
      if (Number(res.numUpdatedRows) > 0) {
        total += r.count
        break
      }
      // Changed meanwhile by the running service: read it again and reseal what it holds now.
      row = (await where(q.selectFrom(c.table).select([...c.keys, c.column]), row).executeTakeFirst()) as Record<string, string>
    }
  }
  return total
}
