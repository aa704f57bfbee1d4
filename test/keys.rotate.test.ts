// Rotating the key that seals secrets at rest, as an operator does it: secrets stored under key A;
// the service restarted on key B with A as WARREN_ENCRYPTION_KEY_PREVIOUS; `warren keys reseal`
// seals everything again under B; after it A can go. A wrong key reseals nothing and says so.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { NODE, ROOT, serviceProcess, type ServiceProcess } from './service-process.ts'
import { secretBox } from '../src/shared/secret-box.ts'

const A = 'a'.repeat(64)
const B = 'b'.repeat(64)
const C = 'c'.repeat(64)
const boxOf = (hex: string) => secretBox(Buffer.from(hex, 'hex'))

/** `warren keys reseal` on the data folder with these keys: its exit code and its JSON line. */
function reseal(dataDir: string, env: Record<string, string>): Promise<{ code: number; report: { resealed: number; unreadable: number; by_table: Record<string, number> } }> {
  return new Promise((resolve) =>
    execFile(NODE, ['src/main.ts', 'keys', 'reseal'], { cwd: ROOT, env: { PATH: process.env.PATH, WARREN_DATA_DIR: dataDir, ...env }, timeout: 90_000 }, (err, stdout) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, report: JSON.parse(stdout.trim().split('\n').at(-1)!) }),
    ),
  )
}

describe('encryption key rotation [sqlite, child process]', () => {
  let svc: ServiceProcess
  let dataDir: string
  before(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-keys-'))
    svc = serviceProcess({ WARREN_DATA_DIR: dataDir, WARREN_ENCRYPTION_KEY: A, WARREN_SANDBOX_PREFIX: `k${Math.floor(Math.random() * 1e5).toString(36)}` })
    await svc.start()
    svc.token = await svc.mint('keys-org')
  })
  after(async () => {
    if (svc?.running) await svc.stop('SIGTERM')
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  /** Every sealed value in the store, with where it is. */
  function sealedValues(): { where: string; value: string }[] {
    const db = new DatabaseSync(path.join(dataDir, 'warren.db'), { readOnly: true })
    try {
      const out: { where: string; value: string }[] = []
      const col = (table: string, column: string) => {
        for (const r of db.prepare(`select ${column} as v from ${table} where ${column} is not null`).all() as { v: string }[]) out.push({ where: `${table}.${column}`, value: r.v })
      }
      col('model_credentials', 'api_key_enc')
      col('webhook_subscriptions', 'secret_enc')
      col('environment_profiles', 'env_enc')
      col('idempotency_keys', 'body')
      col('nodes', 'secret')
      for (const r of db.prepare('select tools from agents').all() as { tools: string }[]) for (const t of JSON.parse(r.tools) ?? []) if (t.secrets_enc) out.push({ where: 'agents.tools', value: t.secrets_enc })
      for (const r of db.prepare('select agent from sessions').all() as { agent: string }[]) for (const t of JSON.parse(r.agent).tools ?? []) if (t.secrets_enc) out.push({ where: 'sessions.agent', value: t.secrets_enc })
      return out
    } finally {
      db.close()
    }
  }
  const opens = (hex: string, value: string) => {
    try {
      boxOf(hex).open(value)
      return true
    } catch {
      return false
    }
  }

  it('reseals every stored secret under the new key, which alone then opens them; a wrong key changes nothing', async () => {
    const mcp = { type: 'mcp', name: 'docs', url: 'https://mcp.example.com/mcp', authorization: 'Bearer rotate-me' }
    const created = [
      await svc.api('POST', '/v1/model-credentials', { provider: 'openai', api_key: 'sk-rotate-secret', base_url: 'https://api.example.com/v1', models: ['m1'] }),
      await svc.api('POST', '/v1/webhooks', { url: 'https://hooks.example.com/warren', events: ['session.idle'] }),
      await svc.api('POST', '/v1/environment-profiles', { name: 'prof', env: { SECRET: 'profile-secret' } }),
      await svc.api('POST', '/v1/agents', { name: 'a', model: 'm1', tools: [mcp] }),
    ]
    for (const r of created) assert.equal(r.status, 201, r.text)
    const keyed = await fetch(`${svc.url}/v1/sessions`, { method: 'POST', headers: { authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', 'idempotency-key': 'rotate-1' }, body: JSON.stringify({ tools: [mcp] }) })
    const firstText = await keyed.text()
    assert.equal(keyed.status, 201, firstText)
    const firstId = (JSON.parse(firstText) as { id: string }).id
    await svc.stop('SIGTERM')

    const before = sealedValues()
    assert.deepEqual([...new Set(before.map((v) => v.where))].sort(), ['agents.tools', 'environment_profiles.env_enc', 'idempotency_keys.body', 'model_credentials.api_key_enc', 'nodes.secret', 'sessions.agent', 'webhook_subscriptions.secret_enc'])
    for (const v of before) assert.ok(opens(A, v.value) && !opens(B, v.value), v.where)

    const rotated = await reseal(dataDir, { WARREN_ENCRYPTION_KEY: B, WARREN_ENCRYPTION_KEY_PREVIOUS: A })
    assert.equal(rotated.code, 0)
    assert.equal(rotated.report.unreadable, 0)
    assert.equal(rotated.report.resealed, before.length)
    const after = sealedValues()
    assert.equal(after.length, before.length)
    for (const v of after) assert.ok(opens(B, v.value) && !opens(A, v.value), `${v.where} is sealed under the new key only`)
    // What is sealed is the same secret.
    const key = after.find((v) => v.where === 'model_credentials.api_key_enc')!
    assert.equal(boxOf(B).open(key.value), 'sk-rotate-secret')

    // Under the wrong key nothing opens: nothing is rewritten, and the exit code says so.
    const wrong = await reseal(dataDir, { WARREN_ENCRYPTION_KEY: C })
    assert.equal(wrong.code, 2)
    assert.equal(wrong.report.resealed, 0)
    assert.equal(wrong.report.unreadable, before.length)
    assert.deepEqual(sealedValues(), after)

    // The service runs on the new key alone and reads what it sealed (the stored agent starts a session).
    const svc2 = serviceProcess({ WARREN_DATA_DIR: dataDir, WARREN_ENCRYPTION_KEY: B, WARREN_SANDBOX_PREFIX: `k${Math.floor(Math.random() * 1e5).toString(36)}` })
    await svc2.start()
    try {
      svc2.token = svc.token
      const agents = await svc2.api('GET', '/v1/agents')
      const started = await svc2.api('POST', '/v1/sessions', { agent: { id: agents.body.data[0].id } })
      assert.equal(started.status, 201, started.text)
      // The idempotent create gives its first answer again, read back under the new key.
      const again = await fetch(`${svc2.url}/v1/sessions`, { method: 'POST', headers: { authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', 'idempotency-key': 'rotate-1' }, body: JSON.stringify({ tools: [mcp] }) })
      assert.equal(again.status, 201)
      assert.equal(((await again.json()) as { id: string }).id, firstId)
    } finally {
      await svc2.stop('SIGTERM')
    }
  })
})
