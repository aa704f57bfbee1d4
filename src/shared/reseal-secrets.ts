import type { Store } from '../db/database.ts'
import type { SecretBox } from './secret-box.ts'

export type ResealReport = { resealed: number; unreadable: number; by_table: Record<string, number> }

type Sealer = (value: string) => string | null

/** Re-seals the `secrets_enc` of every MCP entry in a JSON text of tool entries (or of an agent holding them). */
function resealToolsJson(text: string | null, reseal: Sealer, inAgent: boolean): { text: string | null; changed: number } {
  if (!text) return { text, changed: 0 }
  const parsed = JSON.parse(text) as Record<string, unknown> | unknown[] | null
  const tools = (inAgent ? (parsed as { tools?: unknown } | null)?.tools : parsed) as { secrets_enc?: string }[] | null | undefined
  if (!Array.isArray(tools)) return { text, changed: 0 }
  let changed = 0
  for (const t of tools) {
    if (typeof t?.secrets_enc !== 'string') continue
    const next = reseal(t.secrets_enc)
    if (next !== null) (t.secrets_enc = next), changed++
  }
  return { text: changed ? JSON.stringify(parsed) : text, changed }
}

/**
 * Opens every secret the store holds sealed (with the current key or the previous one) and seals
 * it again under the current key, row by row: after it, the previous key can be dropped. A value
 * neither key opens is left as it is and counted; nothing is ever written in plain text.
 */
export async function resealSecrets(store: Store, box: SecretBox): Promise<ResealReport> {
  const report: ResealReport = { resealed: 0, unreadable: 0, by_table: {} }
  const reseal: Sealer = (value) => {
    try {
      return box.seal(box.open(value))
    } catch {
      report.unreadable++
      return null
    }
  }
  const count = (table: string, n: number) => {
    report.resealed += n
    report.by_table[table] = (report.by_table[table] ?? 0) + n
  }
  const db = store.db
  for (const row of await db.selectFrom('model_credentials').select(['id', 'api_key_enc']).execute()) {
    const next = reseal(row.api_key_enc)
    if (next !== null) await db.updateTable('model_credentials').set({ api_key_enc: next }).where('id', '=', row.id).execute(), count('model_credentials', 1)
  }
  for (const row of await db.selectFrom('webhook_subscriptions').select(['id', 'secret_enc']).execute()) {
    const next = reseal(row.secret_enc)
    if (next !== null) await db.updateTable('webhook_subscriptions').set({ secret_enc: next }).where('id', '=', row.id).execute(), count('webhook_subscriptions', 1)
  }
  for (const row of await db.selectFrom('environment_profiles').select(['id', 'env_enc']).execute()) {
    const next = reseal(row.env_enc)
    if (next !== null) await db.updateTable('environment_profiles').set({ env_enc: next }).where('id', '=', row.id).execute(), count('environment_profiles', 1)
  }
  for (const row of await db.selectFrom('idempotency_keys').select(['token_id', 'key', 'body']).where('body', 'is not', null).execute()) {
    const next = reseal(row.body!)
    if (next !== null) await db.updateTable('idempotency_keys').set({ body: next }).where('token_id', '=', row.token_id).where('key', '=', row.key).execute(), count('idempotency_keys', 1)
  }
  for (const row of await db.selectFrom('agents').select(['id', 'tools']).execute()) {
    const { text, changed } = resealToolsJson(row.tools, reseal, false)
    if (changed) await db.updateTable('agents').set({ tools: text! }).where('id', '=', row.id).execute(), count('agents', changed)
  }
  for (const row of await db.selectFrom('sessions').select(['id', 'agent']).execute()) {
    const { text, changed } = resealToolsJson(row.agent, reseal, true)
    if (changed) await db.updateTable('sessions').set({ agent: text! }).where('id', '=', row.id).execute(), count('sessions', changed)
  }
  return report
}
