// bench/stop: how long `warren serve` takes to exit after SIGTERM with one session whose workspace
// holds 0 and then 20,000 small files (made by one bash call of a turn), on SQLite and, when it is
// reachable, PostgreSQL (where a graceful stop also leaves a snapshot of the workspace for the node
// that takes the session over). Each run also says what the stop left on the host of its prefix.
// Usage: node_modules/.bin/node bench/stop.ts [--files 0,20000] [--dialects sqlite,postgres]
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { PG_URL } from '../test/harness.ts'
import { startModelServer } from '../test/fakes/model-server.ts'
import { waitFor } from '../test/fixtures.ts'
import { serviceProcess } from '../test/service-process.ts'
import { leftOnHost } from '../test/left-on-host.ts'

const opt = (name: string, def: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1]! : def)
const sizes = opt('--files', '0,20000').split(',').map(Number)
const dialects = opt('--dialects', 'sqlite,postgres').split(',')

const fake = await startModelServer({ models: ['m1'] })
console.log(`bench/stop: SIGTERM to exit of \`warren serve\` with one session up (target: a few seconds whatever the workspace holds)`)
try {
  for (const dialect of dialects) {
    for (const files of sizes) {
      const prefix = 's' + Array.from(randomBytes(4), (b) => 'abcdefghijklmnopqrstuvwxyz0123456789'[b % 36]).join('')
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-stop-'))
      const schema = `stop_${randomBytes(6).toString('hex')}`
      const admin = dialect === 'postgres' ? new pg.Client({ connectionString: PG_URL }) : null
      const env: Record<string, string> = { WARREN_DATA_DIR: dataDir, WARREN_SANDBOX_PREFIX: prefix, WARREN_LOG_LEVEL: 'warn', WARREN_RATE_GENERAL_PER_MIN: '100000' }
      if (admin) {
        await admin.connect()
        await admin.query(`CREATE SCHEMA "${schema}"`)
        env.DATABASE_URL = `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}options=${encodeURIComponent(`-c search_path=${schema}`)}`
        env.WARREN_ENCRYPTION_KEY = randomBytes(32).toString('hex')
      }
      const service = serviceProcess(env)
      try {
        service.token = await service.mint('bench-stop')
        await service.start()
        const mc = await service.api('POST', '/v1/model-credentials', { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] })
        if (mc.status !== 201) throw new Error(`model connection: ${mc.status} ${mc.text}`)
        const created = await service.api('POST', '/v1/sessions', {})
        if (created.status !== 201) throw new Error(`session: ${created.status} ${created.text}`)
        const id = created.body.id as string
        const command = files > 0 ? `mkdir -p tree && cd tree && seq 1 ${files} | xargs -n 1000 touch && echo made` : 'echo made'
        fake.script({ toolCalls: [{ name: 'bash', args: { command } }] }, { text: 'Done.' })
        const sent = await service.api('POST', `/v1/sessions/${id}/messages`, { text: 'make the files' })
        if (sent.status !== 202) throw new Error(`message: ${sent.status} ${sent.text}`)
        const turnId = sent.body.id as string
        // A poll the service's keep-alive cut short is asked again.
        const turn = () => service.api('GET', `/v1/sessions/${id}/turns/${turnId}`).then((r) => r.body, () => null)
        await waitFor('the turn to complete', async () => (await turn())?.status === 'completed', 600_000)
        const t = performance.now()
        const exit = await service.stop('SIGTERM', 300_000)
        const ms = performance.now() - t
        const left = leftOnHost(prefix)
        console.log(`${dialect.padEnd(8)} ${String(files).padStart(6)} files   stop ${ms.toFixed(0).padStart(6)} ms   exit ${exit.code ?? exit.signal}   left: ${left.length === 0 ? 'nothing' : left.join(', ')}`)
      } catch (err) {
        console.log(service.output.slice(-40).join('\n'))
        throw err
      } finally {
        if (service.running) await service.stop('SIGKILL').catch(() => {})
        if (admin) {
          await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {})
          await admin.end()
        }
        fs.rmSync(dataDir, { recursive: true, force: true })
      }
    }
  }
} finally {
  await fake.close()
}
