// bench/api: authenticated GET /v1/sessions/{id} and POST /v1/sessions at 32 concurrent
// connections, beside a bare Fastify route measured in the same run. Prints the ratios.
// Usage: node_modules/.bin/node bench/api.ts [--seconds N]
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fmt, load } from './load.ts'

const root = path.resolve(import.meta.dirname, '..')
const node = path.join(root, 'node_modules/.bin/node')
const seconds = Number(process.argv[process.argv.indexOf('--seconds') + 1]) || 5
const CONNECTIONS = 32

function start(args: string[], env: Record<string, string>): Promise<{ child: ChildProcess; url: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(node, args, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString()
      const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out)
      if (m) resolve({ child, url: m[1]! })
    })
    child.on('exit', (code) => reject(new Error(`${args.join(' ')} exited with ${code}: ${out}`)))
  })
}

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-'))
const env = {
  WARREN_DATA_DIR: dataDir,
  PORT: '0',
  WARREN_LOG_LEVEL: 'warn',
  WARREN_RATE_GENERAL_PER_MIN: '100000000',
  WARREN_RATE_SESSIONS_PER_MIN: '100000000',
  WARREN_MAX_SESSIONS_PER_ORG: '100000000',
}
const minted = JSON.parse(execFileSync(node, ['src/main.ts', 'tokens', 'create', '--org', 'bench'], { cwd: root, env: { ...process.env, ...env } }).toString())
const auth = { authorization: `Bearer ${minted.token}` }

const bare = await start(['bench/bare-server.ts'], {})
const warren = await start(['src/main.ts', 'serve'], env)
try {
  const mc = await fetch(`${warren.url}/v1/model-credentials`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ provider: 'openai', api_key: 'sk-bench', models: ['gpt-bench'] }) })
  if (!mc.ok) throw new Error(`model connection: ${mc.status} ${await mc.text()}`)
  const created = await fetch(`${warren.url}/v1/sessions`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ title: 'bench', metadata: { k: 'v' } }) })
  const session = (await created.json()) as { id: string }

  // Warm both servers so that neither pays its JIT inside the measured window.
  await load({ url: `${bare.url}/bare`, connections: CONNECTIONS, seconds: 1 })
  await load({ url: `${warren.url}/v1/sessions/${session.id}`, headers: auth, connections: CONNECTIONS, seconds: 1 })

  const base = await load({ url: `${bare.url}/bare`, connections: CONNECTIONS, seconds })
  const get = await load({ url: `${warren.url}/v1/sessions/${session.id}`, headers: auth, connections: CONNECTIONS, seconds })
  const post = await load({ url: `${warren.url}/v1/sessions`, method: 'POST', headers: auth, body: () => JSON.stringify({ title: 'b' }), connections: CONNECTIONS, seconds, expect: 201 })

  console.log(`bench/api on SQLite, ${CONNECTIONS} connections, ${seconds} s each`)
  console.log(`bare fastify route        ${fmt(base)}`)
  console.log(`GET /v1/sessions/{id}     ${fmt(get)}`)
  console.log(`POST /v1/sessions         ${fmt(post)}`)
  console.log(`ratio GET/bare throughput:  ${(get.rps / base.rps).toFixed(2)} (target >= 0.50)`)
  console.log(`ratio POST/bare throughput: ${(post.rps / base.rps).toFixed(2)}`)
  console.log(`ratio GET/bare p99:         ${(get.p99 / base.p99).toFixed(2)}`)
} finally {
  bare.child.kill()
  warren.child.kill()
  fs.rmSync(dataDir, { recursive: true, force: true })
}
