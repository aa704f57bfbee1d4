// bench/api: authenticated GET /v1/sessions/{id} and POST /v1/sessions at 32 concurrent
// connections, beside a bare Fastify route measured in the same run. Prints the ratios and the
// create latencies, each with its target.
// Usage: node_modules/.bin/node bench/api.ts [--seconds N] [--get-only]
// --get-only skips the POST part (which starts a workspace per create) to measure reads alone.
//
// Fairness on a small machine: both servers are pinned to one core and this load generator to
// another (when taskset and two cores exist), the two are measured in alternating rounds, and
// the median round counts. Server CPU per request is read from /proc beside the throughput.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fmt, load, type LoadResult } from './load.ts'
import { listeningUrl } from './listening.ts'
import { cpuMs } from './proc-cpu.ts'

const root = path.resolve(import.meta.dirname, '..')
const node = path.join(root, 'node_modules/.bin/node')
const seconds = Number(process.argv[process.argv.indexOf('--seconds') + 1]) || 3
const CONNECTIONS = 32
const ROUNDS = 3
const getOnly = process.argv.includes('--get-only')
const CREATE_P99_TARGET_MS = 1000

const canPin = os.cpus().length >= 2 && fs.existsSync('/usr/bin/taskset')
if (canPin) execFileSync('taskset', ['-cp', '1', String(process.pid)], { stdio: 'ignore' })

async function start(args: string[], env: Record<string, string>): Promise<{ child: ChildProcess; url: string }> {
  const [cmd, argv] = canPin ? ['taskset', ['-c', '0', node, ...args]] : [node, args]
  const child = spawn(cmd, argv, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  return { child, url: await listeningUrl(child, args.join(' ')) }
}

async function measure(pid: number, opts: Parameters<typeof load>[0]): Promise<LoadResult & { cpuUs: number }> {
  const before = cpuMs(pid)
  const r = await load(opts)
  return { ...r, cpuUs: ((cpuMs(pid) - before) * 1000) / r.requests }
}

const median = <T extends { rps: number }>(xs: T[]): T => [...xs].sort((a, b) => a.rps - b.rps)[Math.floor(xs.length / 2)]!

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-'))
const env = {
  WARREN_DATA_DIR: dataDir,
  PORT: '0',
  WARREN_LOG_LEVEL: 'warn',
  WARREN_RATE_GENERAL_PER_MIN: '100000000',
  WARREN_RATE_SESSIONS_PER_MIN: '100000000',
  WARREN_MAX_SESSIONS_PER_ORG: '100000000',
  // Its own host resources: the default prefix's start-up clean-up would take every other
  // instance's sandbox cgroups on this host (tests, other benches) for orphans.
  WARREN_SANDBOX_PREFIX: 'ba',
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
  // GET is measured once the session's workspace is up: its one-off bring-up (and the warm pools
  // it sets refilling) is the create's cost, not the read's.
  for (let state = ''; state !== 'running'; await new Promise((r) => setTimeout(r, 200))) {
    const res = await fetch(`${warren.url}/v1/sessions/${session.id}`, { headers: auth })
    state = ((await res.json()) as { environment: { state: string } }).environment.state
    if (state === 'failed') throw new Error('the workspace of the GET session failed to come up')
  }
  const bareReq = { url: `${bare.url}/bare`, connections: CONNECTIONS, seconds }
  const getReq = { url: `${warren.url}/v1/sessions/${session.id}`, headers: auth, connections: CONNECTIONS, seconds }

  // Warm both servers so that neither pays its JIT inside a measured round.
  await load({ ...bareReq, seconds: 1 })
  await load({ ...getReq, seconds: 1 })
  const bares: (LoadResult & { cpuUs: number })[] = []
  const gets: (LoadResult & { cpuUs: number })[] = []
  for (let i = 0; i < ROUNDS; i++) {
    bares.push(await measure(bare.child.pid!, bareReq))
    gets.push(await measure(warren.child.pid!, getReq))
  }
  const post = getOnly ? null : await measure(warren.child.pid!, { url: `${warren.url}/v1/sessions`, method: 'POST', headers: auth, body: () => JSON.stringify({ title: 'b' }), connections: CONNECTIONS, seconds, expect: 201 })
  const base = median(bares)
  const get = median(gets)

  console.log(`bench/api on SQLite, ${CONNECTIONS} connections, median of ${ROUNDS} rounds of ${seconds} s${canPin ? ', servers on core 0, load generator on core 1' : ''}`)
  console.log(`bare fastify route        ${fmt(base)}  server ${base.cpuUs.toFixed(1)} µs CPU/req`)
  console.log(`GET /v1/sessions/{id}     ${fmt(get)}  server ${get.cpuUs.toFixed(1)} µs CPU/req`)
  if (post) console.log(`POST /v1/sessions         ${fmt(post)}  server ${post.cpuUs.toFixed(1)} µs CPU/req`)
  console.log(`ratio GET/bare throughput:  ${(get.rps / base.rps).toFixed(2)} (target >= 0.50)`)
  // Each GET round beside the bare round just before it: on a machine whose load drifts (other
  // processes), a pair shares its conditions where the two medians may not.
  const paired = gets.map((g, i) => g.rps / bares[i]!.rps).sort((a, b) => a - b)
  console.log(`  paired rounds:            ${paired.map((r) => r.toFixed(2)).join(', ')} (median ${paired[Math.floor(paired.length / 2)]!.toFixed(2)})`)
  // How busy each server kept its core (req/s × CPU per request): a round well under 100% was
  // held back by something other than the server's own cost (the load generator, or other work
  // on the machine), so its throughput says little about that server.
  const share = (rs: (LoadResult & { cpuUs: number })[]) => rs.map((r) => `${((r.rps * r.cpuUs) / 1e4).toFixed(0)}%`).join(', ')
  console.log(`  server core busy/round:   bare ${share(bares)}; GET ${share(gets)}`)
  console.log(`ratio GET/bare server CPU per request: ${(get.cpuUs / base.cpuUs).toFixed(2)}`)
  if (post) console.log(`ratio POST/bare throughput: ${(post.rps / base.rps).toFixed(2)}`)
  console.log(`ratio GET/bare p99 latency: ${(get.p99 / base.p99).toFixed(2)}`)
  // Every create starts a workspace; the 201 must not wait for any of them (WARREN_SANDBOX_STARTS).
  if (post) console.log(`creates at ${CONNECTIONS} concurrent:     p50 ${post.p50.toFixed(0)} ms, p99 ${post.p99.toFixed(0)} ms, ${post.rps.toFixed(0)} req/s (target: p99 < ${CREATE_P99_TARGET_MS} ms; was 8 req/s, p99 12.8 s)`)
} finally {
  bare.child.kill()
  warren.child.kill()
  fs.rmSync(dataDir, { recursive: true, force: true })
}
