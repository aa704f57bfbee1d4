// bench/turn: the service's own overhead per agent step with one `bash` call, beside the raw
// command run through a sandbox and `bash -c` of it on the host, all in the same run.
// Usage: node_modules/.bin/node bench/turn.ts [--steps N | --steps 10,100,1000] [--output-bytes N] [--files 0,10000,100000]
//
// The service runs as its own process (SQLite, a real bubblewrap workspace). A minimal model
// server in this process answers every request with one `bash` tool call of the same command,
// and stamps when each response ended and when the next request arrived: that gap holds the
// service's work (persist the step, decide, run the tool, persist its result, load the
// conversation, build the next request) plus the command's own run. The command's own run is
// measured beside it, through a sandbox of the same provider, in turn with `bash -c` of the same
// command on the host (the baseline: target command path ≤ 1.5× it, step gap p50 ≤ 20 ms).
// Target: p50 overhead < 5 ms.
//
// CPU per step is read twice: the service's own, and that of every process of its tree (the
// service, its spawners, the shells parked for commands, nsenter, the commands, the sandbox's
// init), each with what its reaped children used (target ≤ 25 ms a step).
//
// Long conversations: `--steps 10,100,1000` runs one turn of 1,000 steps and prints the overhead
// around each point (the steps either side of it) with the service's RSS there, and the ratio of
// the last point to the first (target ≤ 1.2×); `--output-bytes N` makes each command print N bytes,
// which the conversation carries (truncated as the bash tool does) until compaction takes it out.
//
// Large workspaces: `--files 0,10000,100000` runs the same turn once per workspace size, the
// workspace filled first with that many small files (folders of 100, written from the host once
// the workspace is up, before the turn), to show that a step's cost does not grow with the
// workspace (target: within 1.5× of the empty workspace at 100,000 files).
//
// Image workspaces: `--image` runs the session (and the raw command's sandbox) on the tests'
// minimal image from a real registry on loopback (docker-registry, pulled before the turn);
// `--image-root` the same with root inside (WARREN_SANDBOX_ROOT_RANGES=1). The targets hold in
// both kinds of workspace.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { createLocalProvider } from '../src/sandbox/local/create-local.ts'
import { listeningUrl } from './listening.ts'
import { chatChunk, chatStream } from './chat-sse.ts'
import { treeCpuMs, type TreeCpu } from './proc-cpu.ts'
import { imagePuller } from '../src/images/image-puller.ts'
import { pushMinimalImage, startRegistry, type Registry } from '../test/registry.ts'

const root = path.resolve(import.meta.dirname, '..')
const node = path.join(root, 'node_modules/.bin/node')
const arg = (name: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined)
const sizes = arg('--files')?.split(',').map(Number) ?? null
const imageRoot = process.argv.includes('--image-root')
const onImage = imageRoot || process.argv.includes('--image')
const registry: Registry | null = onImage ? await startRegistry() : null
if (registry) await pushMinimalImage(registry, 'bench/minimal', '1')
const imageRef = registry ? `${registry.host}/bench/minimal:1` : null
const kind = imageRef ? `an image workspace (${imageRoot ? 'root inside' : 'unprivileged'})` : 'a host-system workspace'
// --- long conversations: the points to report and the output each step prints ---------------
const points = (arg('--steps') ?? '60').split(',').map(Number).filter((n) => n > 0)
const steps = Math.max(...points, 1)
const outputBytes = Number(arg('--output-bytes')) || 0
const COMMAND = outputBytes > 0 ? `yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c ${outputBytes}; echo step >> log.txt` : 'echo step >> log.txt'
/** The service's resident memory (MiB) when the model receives request `n`, for the points asked. */
const rssAt = new Map<number, number>()
/**
 * The service's CPU time (ms, user + system) when the model receives request `n`: less shaken
 * than wall time by a busy machine, it says whether the service's own work per step grows.
 */
const cpuAt = new Map<number, number>()
const cpuMarks = new Set([5, steps, ...points.flatMap((p) => [Math.max(5, p - 10), Math.min(steps, p + 10)])])
const readCpu = (pid: number | undefined) => {
  const f = pid ? fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ') : null
  return f ? ((Number(f[11]) + Number(f[12])) * 1000) / 100 : NaN
}
const cpuPerStep = (from: number, to: number) => (cpuAt.get(to)! - cpuAt.get(from)!) / (to - from)
/** The CPU of the service's whole tree (ms) when the model receives request `n`: first and last marks only (a walk of /proc). */
const treeAt = new Map<number, TreeCpu>()
const treeMarks = new Set([5, steps])
const readRss = (pid: number | undefined) => {
  const m = pid ? /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8')) : null
  return m ? Number(m[1]) / 1024 : NaN
}
const KEY = 'sk-bench-turn-0123456789'
// Prefixes and uids of this run alone: a service starting on a prefix removes what others left
// under it, so two runs side by side (several engineers on one machine) must not share them.
const own = process.pid % 10_000
const runTag = own.toString(36)

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!
const ms = (x: number) => `${x.toFixed(2)} ms`
const sleep = (n: number) => new Promise((r) => setTimeout(r, n))

// --- the model: one bash call per request until `steps`, then a final text reply -----------
const ended: number[] = []
const arrived: number[] = []
let served = 0
/** The service process of the turn running now (its CPU and memory are read as requests arrive). */
let child: ChildProcess | undefined
const sse = (res: http.ServerResponse, chunks: unknown[]) => chatStream(res, chunks, () => ended.push(performance.now()))
const chunk = chatChunk
const model = http.createServer((req, res) => {
  arrived.push(performance.now())
  if (points.includes(served)) rssAt.set(served, readRss(child?.pid))
  if (cpuMarks.has(served)) cpuAt.set(served, readCpu(child?.pid))
  if (treeMarks.has(served) && child?.pid) treeAt.set(served, treeCpuMs(child.pid))
  req.resume()
  req.on('end', () => {
    if (req.url?.endsWith('/models')) return res.end(JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model' }] }))
    const n = ++served
    if (n > steps) return sse(res, [chunk({ role: 'assistant', content: 'done' }, null), chunk({}, 'stop')])
    const call = { index: 0, id: `call_${n}`, type: 'function', function: { name: 'bash', arguments: JSON.stringify({ command: COMMAND }) } }
    sse(res, [chunk({ role: 'assistant', content: null, tool_calls: [call] }, null), chunk({}, 'tool_calls')])
  })
})
await new Promise<void>((r) => model.listen(0, '127.0.0.1', r))
const modelUrl = `http://127.0.0.1:${(model.address() as AddressInfo).port}/v1`

// --- the baseline: the same command through a sandbox of the same provider --------------------
/** The raw command's sandbox's image cache (the service has its own in its data folder). */
const imagesDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-images-'))
const rawDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-raw-'))
fs.chmodSync(rawDir, 0o777)
const hostDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-host-'))
/** `bash -c` of the command on the host, started from this process, as the sandbox's command is asked for. */
function hostBash(): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('bash', ['-c', COMMAND], { cwd: hostDir, stdio: ['ignore', 'pipe', 'pipe'] })
    p.stdout.resume()
    p.stderr.resume()
    p.once('error', reject)
    p.once('close', () => resolve())
  })
}

/**
 * The command's own times through a new sandbox (up to 200, after 10 for warming up), each
 * followed by `bash -c` of it on the host, so a machine whose load drifts moves both alike.
 */
async function rawTimes(): Promise<{ raw: number[]; host: number[] }> {
  const images = imageRef ? { images: imagePuller({ dir: imagesDir, registry: { allowPrivate: ['127.0.0.1/32'] } }), rootRanges: imageRoot ? 1 : 0 } : {}
  const provider = await createLocalProvider({ workspaceRoot: rawDir, prefix: `bt${runTag}`, uidBase: 395_000, uidCount: 1000, ...images })
  const sandbox = await provider.create({
    id: 'bench-raw',
    workspaceMount: '/workspace',
    env: {},
    network: { allow: [] },
    limits: { memoryBytes: 512 * 1024 * 1024, pids: 128, cpus: 1 },
    ...(imageRef ? { image: { ref: imageRef } } : {}),
  })
  const raw: number[] = []
  const host: number[] = []
  for (let i = 0; i < Math.min(steps, 200) + 10; i++) {
    let t = performance.now()
    await sandbox.exec({ command: COMMAND })
    if (i >= 10) raw.push(performance.now() - t)
    t = performance.now()
    await hostBash()
    if (i >= 10) host.push(performance.now() - t)
  }
  await sandbox.destroy()
  await provider.close()
  return { raw, host }
}

// --- the service ---------------------------------------------------------------------------
/** One turn of `steps` bash steps in a new service and session; the gap before each step's next request, warm-up left out. */
async function stepGaps(filesInWorkspace = 0): Promise<number[]> {
  ended.length = 0
  arrived.length = 0
  served = 0
  rssAt.clear()
  cpuAt.clear()
  treeAt.clear()
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-turn-'))
  const env = { ...process.env, WARREN_DATA_DIR: dataDir, PORT: '0', WARREN_LOG_LEVEL: 'warn', WARREN_MODEL_ALLOW_PRIVATE: '127.0.0.1/32', WARREN_SANDBOX_PREFIX: `bw${runTag}`, WARREN_SANDBOX_UID_BASE: String(1_000_000 + own * 10_000), ...(imageRef ? { WARREN_IMAGE_ALLOW_PRIVATE: '127.0.0.1/32', WARREN_SANDBOX_ROOT_RANGES: imageRoot ? '1' : '0' } : {}) }
  const minted = JSON.parse(execFileSync(node, ['src/main.ts', 'tokens', 'create', '--org', 'bench'], { cwd: root, env }).toString())
  const headers = { authorization: `Bearer ${minted.token}`, 'content-type': 'application/json' }
  const proc: ChildProcess = spawn(node, ['src/main.ts', 'serve'], { cwd: root, env, stdio: ['ignore', 'pipe', 'inherit'] })
  child = proc
  try {
    const url = await listeningUrl(proc, 'warren')
    const post = async (p: string, body: unknown) => {
      const r = await fetch(`${url}${p}`, { method: 'POST', headers, body: JSON.stringify(body) })
      if (!r.ok) throw new Error(`${p}: ${r.status} ${await r.text()}`)
      return r.json() as Promise<{ id: string }>
    }
    const turnStatus = async (sessionId: string, turnId: string): Promise<{ status: string; error: unknown } | null> => {
      const r = await fetch(`${url}/v1/sessions/${sessionId}/turns/${turnId}`, { headers })
      // A long turn outlasts the rate limit's minute: a refused poll is tried again later.
      return r.status === 429 ? null : ((await r.json()) as { status: string; error: unknown })
    }
    await post('/v1/model-credentials', { provider: 'openai', api_key: KEY, base_url: modelUrl, models: ['m'] })
    const session = await post('/v1/sessions', imageRef ? { environment: { image: imageRef } } : {})
    if (filesInWorkspace > 0) await fillWorkspace(url, headers, session.id, path.join(dataDir, 'workspaces', session.id), filesInWorkspace)
    const turn = await post(`/v1/sessions/${session.id}/messages`, { text: 'go' })
    // Polled seldom until the model gave its last answer; a turn that ended early is noticed.
    for (let i = 0; served <= steps; i++) {
      await sleep(200)
      if (i % 10 !== 9) continue
      const t = await turnStatus(session.id, turn.id)
      if (t && t.status !== 'working') break
    }
    for (;;) {
      const t = await turnStatus(session.id, turn.id)
      if (t && t.status !== 'working') {
        if (t.status !== 'completed') throw new Error(`the turn ended ${t.status}: ${JSON.stringify(t.error)}`)
        break
      }
      await sleep(t ? 200 : 1000)
    }
    // The first gap includes the workspace's first start and the JIT warming up: skip a few.
    return ended.slice(5, steps).map((e, i) => arrived[i + 6]! - e)
  } finally {
    proc.kill()
    await new Promise((r) => (proc.exitCode === null && proc.signalCode === null ? proc.once('exit', r) : r(null)))
    child = undefined
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}

/** Once the session's workspace is up, writes `n` small files in folders of 100 under repo/ from the host (readable by the agent, not its to change). */
async function fillWorkspace(url: string, headers: Record<string, string>, sessionId: string, dir: string, n: number): Promise<void> {
  for (;;) {
    const r = await fetch(`${url}/v1/sessions/${sessionId}`, { headers })
    const state = r.ok ? ((await r.json()) as { environment: { state: string } }).environment.state : 'pending'
    if (state === 'running') break
    if (state !== 'pending') throw new Error(`the workspace is ${state}`)
    await sleep(200)
  }
  for (let i = 0; i * 100 < n; i++) {
    fs.mkdirSync(path.join(dir, 'repo', `d${i}`), { recursive: true })
    for (let j = 0; j < 100 && i * 100 + j < n; j++) fs.writeFileSync(path.join(dir, 'repo', `d${i}`, `f${j}.txt`), `${i} ${j}\n`)
  }
  // The filling kept this process busy past the service's keep-alive: a pooled connection may have
  // been closed meanwhile. A read, retried once, uses it up before the turn's POST needs one.
  await fetch(`${url}/v1/sessions/${sessionId}`, { headers }).catch(() => fetch(`${url}/v1/sessions/${sessionId}`, { headers }))
}

/** One turn: the overhead per step beside the raw command, the service's CPU, and the long-conversation points. */
async function oneTurn(): Promise<void> {
  const { raw, host } = await rawTimes()
  const gaps = await stepGaps()
  const rawP50 = pct(raw, 0.5)
  const hostP50 = pct(host, 0.5)
  const overhead = gaps.map((g) => g - rawP50)
  const gapP50 = pct(gaps, 0.5)
  console.log(`bench/turn on SQLite, ${kind}: ${gaps.length} agent steps, each one bash call (\`${COMMAND}\`)`)
  console.log(`bash -c on the host          p50 ${ms(hostP50)}  p90 ${ms(pct(host, 0.9))} (the baseline, in turn with the raw command)`)
  console.log(`raw command in a sandbox     p50 ${ms(rawP50)}  p90 ${ms(pct(raw, 0.9))}  ${(rawP50 / hostP50).toFixed(2)}× bash -c (target ≤ 1.5×)`)
  console.log(`response end → next request  p50 ${ms(gapP50)}  p90 ${ms(pct(gaps, 0.9))}  ${(gapP50 / hostP50).toFixed(2)}× bash -c (target p50 ≤ 20 ms)`)
  console.log(`service overhead per step    p50 ${ms(pct(overhead, 0.5))}  p90 ${ms(pct(overhead, 0.9))} (target p50 < 5 ms)`)
  console.log(`ratio step gap / raw command: ${(gapP50 / rawP50).toFixed(2)}`)
  const [a, b] = [treeAt.get(5), treeAt.get(steps)]
  const per = (f: (t: TreeCpu) => number) => (a && b ? (f(b) - f(a)) / (steps - 5) : NaN)
  console.log(`service CPU per step         ${ms(cpuPerStep(5, steps))} (user + system, steps 5 to ${steps})`)
  console.log(
    `CPU per step, every process  ${ms(per((t) => t.total))} (target ≤ 25 ms): service ${ms(per((t) => t.root))}, spawners ${ms(per((t) => t.spawners))}, ` +
      `parked shells, commands and sandbox ${ms(per((t) => t.total - t.root - t.spawners))}`,
  )
  if (points.length < 2) return
  // The gap after response i (0-based) is step i+1's; around step p: steps p-10 … p+10 within the run.
  const around = (p: number) => {
    const from = Math.max(6, p - 10)
    const to = Math.min(steps, p + 10)
    return ended.slice(from - 1, to).map((e, i) => arrived[from + i]! - e - rawP50)
  }
  console.log(`long conversation, ${outputBytes} bytes of output a step:`)
  const cpuAround = (p: number) => cpuPerStep(Math.max(5, p - 10), Math.min(steps, p + 10))
  for (const p of points) {
    console.log(`  around step ${String(p).padStart(5)}: overhead p50 ${ms(pct(around(p), 0.5))}  p90 ${ms(pct(around(p), 0.9))}  service CPU ${ms(cpuAround(p))} a step  RSS ${rssAt.get(p)?.toFixed(0)} MiB`)
  }
  const first = points[0]!
  const last = points.at(-1)!
  console.log(`ratio overhead step ${last} / step ${first}: ${(pct(around(last), 0.5) / pct(around(first), 0.5)).toFixed(2)} (target ≤ 1.2)`)
  console.log(`ratio service CPU a step, step ${last} / step ${first}: ${(cpuAround(last) / cpuAround(first)).toFixed(2)}`)
}

/**
 * --files: the service's overhead per step at each workspace size beside the raw command, and its
 * ratio to the first size. The raw command is measured again right before each size, so that a
 * machine whose load changes between sizes (other work on it) moves both sides together.
 */
async function filesCurve(sizes: number[]): Promise<void> {
  console.log(`bench/turn --files on SQLite: ${steps} agent steps per size, each one bash call (\`${COMMAND}\`)`)
  let base: number | null = null
  for (const n of sizes) {
    const rawN = pct((await rawTimes()).raw, 0.5)
    const gaps = await stepGaps(n)
    const overhead = gaps.map((g) => g - rawN)
    const p50 = pct(overhead, 0.5)
    base ??= p50
    const target = n >= 100_000 ? ' (target ≤ 1.50× at 100,000 files)' : ''
    console.log(
      `${String(n).padStart(7)} files: step gap p50 ${ms(pct(gaps, 0.5))}, raw command p50 ${ms(rawN)}, service overhead per step p50 ${ms(p50)} p90 ${ms(pct(overhead, 0.9))}; ratio to ${sizes[0]} files ${(p50 / base).toFixed(2)}×${target}`,
    )
  }
}

try {
  if (sizes) await filesCurve(sizes)
  else await oneTurn()
} finally {
  child?.kill()
  model.close()
  await registry?.stop()
  fs.rmSync(rawDir, { recursive: true, force: true })
  fs.rmSync(imagesDir, { recursive: true, force: true })
  fs.rmSync(hostDir, { recursive: true, force: true })
}
