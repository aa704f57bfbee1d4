// bench/sandbox-memory: memory of the service holding 100 paused workspaces, against the same
// service holding none, measured in the same run. Target: under 5 MiB of service memory each.
// Usage: node_modules/.bin/node bench/sandbox-memory.ts [--workspaces N]
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import { listeningUrl } from './listening.ts'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

const root = path.resolve(import.meta.dirname, '..')
const node = path.join(root, 'node_modules/.bin/node')
const COUNT = Number(process.argv[process.argv.indexOf('--workspaces') + 1]) || 100

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-mem-'))
const env = {
  ...process.env,
  WARREN_DATA_DIR: dataDir,
  PORT: '0',
  WARREN_LOG_LEVEL: 'warn',
  WARREN_IDLE_PAUSE_MS: '1500',
  WARREN_RATE_GENERAL_PER_MIN: '100000000',
  WARREN_RATE_SESSIONS_PER_MIN: '100000000',
  WARREN_MAX_SESSIONS_PER_ORG: String(COUNT + 10),
}
const minted = JSON.parse(execFileSync(node, ['src/main.ts', 'tokens', 'create', '--org', 'bench'], { cwd: root, env }).toString())
const headers = { authorization: `Bearer ${minted.token}`, 'content-type': 'application/json' }

const child: ChildProcess = spawn(node, ['src/main.ts', 'serve'], { cwd: root, env, stdio: ['ignore', 'pipe', 'ignore'] })
const url = await listeningUrl(child, 'warren')

/** Resident memory of the service process in MiB (what the kernel charges it). */
const rssMiB = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]) / 1024
const api = async (method: string, p: string, body?: unknown) => {
  const r = await fetch(url + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  return (await r.json()) as any
}

try {
  await api('POST', '/v1/model-credentials', { provider: 'openai', api_key: 'sk-bench', models: ['gpt-bench'] })
  // Warm the paths once so that code loading is not counted as per-workspace memory.
  const warm = await api('POST', '/v1/sessions', {})
  await waitState(warm.id, 'paused')
  global.gc?.()
  await new Promise((r) => setTimeout(r, 500))
  const before = rssMiB()
  const ids: string[] = []
  for (let i = 0; i < COUNT; i++) ids.push((await api('POST', '/v1/sessions', {})).id)
  const started = Date.now()
  for (const id of ids) await waitState(id, 'paused')
  await new Promise((r) => setTimeout(r, 1000))
  const afterPaused = rssMiB()
  const perWorkspace = (afterPaused - before) / COUNT
  console.log(`bench/sandbox-memory: ${COUNT} paused workspaces (all paused ${((Date.now() - started) / 1000).toFixed(1)} s after creation)`)
  console.log(`service RSS with 1 workspace:     ${before.toFixed(1)} MiB`)
  console.log(`service RSS with ${COUNT + 1} workspaces:  ${afterPaused.toFixed(1)} MiB`)
  console.log(`per paused workspace:             ${perWorkspace.toFixed(3)} MiB (target < 5 MiB)`)
  for (const id of [warm.id, ...ids]) await api('DELETE', `/v1/sessions/${id}`)
} finally {
  child.kill('SIGTERM')
  await new Promise((r) => child.once('exit', r))
  fs.rmSync(dataDir, { recursive: true, force: true })
}

async function waitState(id: string, state: string): Promise<void> {
  for (let i = 0; i < 1200; i++) {
    const s = await api('GET', `/v1/sessions/${id}`)
    if (s.environment?.state === state) return
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error(`session ${id} never reached ${state}`)
}
