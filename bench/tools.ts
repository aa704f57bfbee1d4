// bench/tools: what the service adds to a tool call, beside the same call made without it in the
// same run.
//   MCP (--only mcp): the `search` tool of a real MCP server (test/fakes/mcp-server.ts: the MCP
//   SDK's server, streamable HTTP, stateless, on loopback in this process), called N times one
//   after another on a client connected once:
//     1. direct: the SDK's own Client over StreamableHTTPClientTransport (the global fetch): the
//        baseline;
//     2. reference: the same SDK Client given the service's guardedFetch (the SSRF guard's
//        lookup, keep-alive http.Agent): the transport alone, to tell it from the rest;
//     3. service: mcpHub (what the turn runner calls for every MCP tool call) listing once, then
//        hub.call(): guardedFetch, the SDK client, timeout and signal, result mapping.
//     The three are measured in interleaved rounds after a warm-up, so drift hits them alike.
//     Target: at most 5 ms added at p50 (service p50 − direct p50).
//   4. A whole turn (the cost the agent sees): the real app in this process (the test harness:
//      SQLite, real sandboxes) with the docs server declared on a session, and a minimal model
//      server that makes K sequential steps of one tool call each, then a final text. It stamps
//      when each response ended and when the next request arrived: that gap holds all the
//      service's work for a step, tool call included. Turns with K calls of mcp__docs__search
//      alternate on the same session (same tools offered, same conversation shape) with turns of
//      K calls of todo_write (items: []), a built-in that touches neither sandbox nor network.
//      The difference of their p50 step gaps is what an MCP call costs inside a turn (the MCP
//      server's own time included); less the direct p50, what the service adds to it.
//   Browser (--only browser): `browse` of one local page (a test host in a network namespace this
//   bench makes, on a private /30 outside the sandboxes' pool, served by node), both paths calling
//   the same browse() of src/tools/browser/browser-tools.ts, so the reading work (goto, load, text,
//   AI accessibility snapshot) is identical:
//     1. direct: playwright-core launching the same Chromium binary on the host (the flags the
//        service gives it, no proxy) and browsing the test host: the baseline;
//     2. service: browserHub (what the turn runner calls for browse, browser_act, screenshot) on a
//        session of the real app (the test harness: SQLite, a real sandbox, its allowlist naming
//        the test host): Chromium started in the session's sandbox, connected over DevTools through
//        the preview path, every request through the workspace's egress proxy.
//     first: from no browser to the first browse result (launch or start-in-sandbox, connect,
//       page, browse), the sandbox itself already running; S starts of each, alternating, the
//       browser closed after each; the median. warm: B browses of the same page on the running
//       browser, in interleaved rounds after a warm-up; p50 and p99.
// Usage: node_modules/.bin/node bench/tools.ts [--only mcp|browser] [--calls N] [--steps K] [--turns T] [--starts S] [--browses B]
//   --calls: measured calls per path (default 2000, after 50 warm-up calls each);
//   --steps: tool-call steps per turn (default 25); --turns: measured turns per kind (default 8);
//   --starts: browser starts per path (default 5); --browses: warm browses per path (default 50).
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chromium, type Browser } from 'playwright-core'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { mcpHub } from '../src/mcp/mcp-hub.ts'
import { guardedFetch } from '../src/mcp/guarded-fetch.ts'
import type { McpEntry } from '../src/mcp/mcp-tools.ts'
import { secretBox } from '../src/shared/secret-box.ts'
import { browserHub, chromiumAvailable, CHROMIUM } from '../src/tools/browser/browser-hub.ts'
import { silentLog } from '../src/shared/log.ts'
import { browse } from '../src/tools/browser/browser-tools.ts'
import { startFakeMcp, type FakeMcp } from '../test/fakes/mcp-server.ts'
import { chatChunk, chatStream } from './chat-sse.ts'

const arg = (name: string, def: number) => Number(process.argv[process.argv.indexOf(name) + 1]) || def
const only = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1] : null
if (only !== null && only !== 'mcp' && only !== 'browser') throw new Error('--only takes mcp or browser')
const CALLS = arg('--calls', 2000)
const STEPS = arg('--steps', 25)
const TURNS = arg('--turns', 8)
const STARTS = arg('--starts', 5)
const BROWSES = arg('--browses', 50)
const WARMUP = 50
const ROUNDS = 6
const BROWSE_ROUNDS = 5
/** Steps at the start of each turn left out of the step figures (the turn's own start-up). */
const SKIP_STEPS = 2
const TARGET_MS = 5

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!
const ms = (x: number) => `${x.toFixed(2)} ms`.padStart(10)
const row = (label: string, xs: number[], hi = 0.99) => console.log(`${label.padEnd(58)}${ms(pct(xs, 0.5))}${ms(pct(xs, hi))}`)

async function mcp() {
  const server: FakeMcp = await startFakeMcp()
  const clients: Client[] = []
  const box = secretBox(Buffer.alloc(32, 7))
  const hub = mcpHub({
    box,
    allowPrivate: ['127.0.0.1/32'],
    spawn: async () => {
      throw new Error('bench/tools declares no local MCP server')
    },
  })
  try {
    // --- 1–3: one call at a time, the three paths interleaved ------------------------------
    const connect = async (fetch?: typeof globalThis.fetch) => {
      const c = new Client({ name: 'bench', version: '1' })
      await c.connect(new StreamableHTTPClientTransport(new URL(server.url), fetch ? { fetch } : {}))
      clients.push(c)
      return c
    }
    const direct = await connect()
    const guarded = await connect(guardedFetch({ allowPrivate: ['127.0.0.1/32'] }) as typeof globalThis.fetch)
    const entry: McpEntry = { type: 'mcp', name: 'docs', url: server.url }
    const listing = await hub.list('bench', 'turn-1', [entry])
    const tool = listing.tools.find((t) => t.name === 'mcp__docs__search')
    if (!tool) throw new Error(`the hub listed no search tool: ${JSON.stringify(listing)}`)
    const signal = new AbortController().signal

    let n = 0
    const paths = {
      direct: async () => {
        const r = await direct.callTool({ name: 'search', arguments: { q: `q${n++}` } })
        if (r.isError) throw new Error('direct call failed')
      },
      guarded: async () => {
        const r = await guarded.callTool({ name: 'search', arguments: { q: `q${n++}` } })
        if (r.isError) throw new Error('guarded call failed')
      },
      hub: async () => {
        const r = await hub.call('bench', tool, { q: `q${n++}` }, signal)
        if (r.isError) throw new Error(`hub call failed: ${r.text}`)
      },
    }
    type Path = keyof typeof paths
    const order: Path[] = ['direct', 'guarded', 'hub']
    const times: Record<Path, number[]> = { direct: [], guarded: [], hub: [] }
    for (const p of order) for (let i = 0; i < WARMUP; i++) await paths[p]()
    const perRound = Math.ceil(CALLS / ROUNDS)
    for (let round = 0; round < ROUNDS; round++) {
      const turnOrder = [...order.slice(round % 3), ...order.slice(0, round % 3)]
      for (const p of turnOrder) {
        for (let i = 0; i < perRound; i++) {
          const t = performance.now()
          await paths[p]()
          times[p].push(performance.now() - t)
        }
      }
    }
    const directP50 = pct(times.direct, 0.5)
    const hubP50 = pct(times.hub, 0.5)
    console.log(`bench/tools --only mcp: \`search\` on a local MCP SDK server (streamable HTTP, stateless), ${times.direct.length} sequential calls per path after ${WARMUP} warm-up, ${ROUNDS} interleaved rounds`)
    console.log(`${'path'.padEnd(58)}${'p50'.padStart(10)}${'p99'.padStart(10)}`)
    row('direct: SDK Client, global fetch (baseline)', times.direct)
    row('reference: SDK Client over the service\'s guardedFetch', times.guarded)
    row('service: mcpHub.call (guardedFetch, SDK client, mapping)', times.hub)
    console.log(`added by the service at p50 (hub − direct): ${(hubP50 - directP50).toFixed(2)} ms  (target ≤ ${TARGET_MS} ms added at p50)`)
    console.log(`ratio hub / direct at p50: ${(hubP50 / directP50).toFixed(2)}   at p99: ${(pct(times.hub, 0.99) / pct(times.direct, 0.99)).toFixed(2)}`)
    console.log(`the hub beside the same SDK client on the same transport (hub − reference) at p50: ${(hubP50 - pct(times.guarded, 0.5)).toFixed(2)} ms`)
    if (hubP50 < directP50) console.log('(the hub is quicker than the baseline: its node:http keep-alive agent answers sooner than the global fetch (undici) the SDK uses by default)')
    console.log('')

    // --- 4: whole turns ----------------------------------------------------------------------
    await turns(server, directP50)
  } finally {
    await Promise.all(clients.map((c) => c.close().catch(() => {})))
    await hub.close()
    await server.close()
  }
}

/** K-step turns alternating MCP and todo_write calls on one session of the real app. */
async function turns(server: FakeMcp, directP50: number) {
  // Imported here: the harness asks PostgreSQL whether it is there unless told SQLite only.
  process.env.WARREN_TEST_DIALECTS ??= 'sqlite'
  const { startWarren } = await import('../test/harness.ts')
  const { NO_RATE_LIMITS, client, newOrg } = await import('../test/turns.helpers.ts')

  // The model: K steps of one call of the current kind, then a final text.
  type Kind = 'mcp' | 'todo'
  let kind: Kind = 'mcp'
  let served = 0
  let ended: number[] = []
  let arrived: number[] = []
  const sse = (res: http.ServerResponse, chunks: unknown[]) => chatStream(res, chunks, () => ended.push(performance.now()))
  const chunk = chatChunk
  const model = http.createServer((req, res) => {
    const isChat = req.url?.endsWith('/chat/completions') === true
    if (isChat) arrived.push(performance.now())
    req.resume()
    req.on('end', () => {
      if (!isChat) return res.end(JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model' }] }))
      const step = ++served
      if (step > STEPS) return sse(res, [chunk({ role: 'assistant', content: 'done' }, null), chunk({}, 'stop')])
      const fn = kind === 'mcp' ? { name: 'mcp__docs__search', arguments: JSON.stringify({ q: `step ${step}` }) } : { name: 'todo_write', arguments: JSON.stringify({ items: [] }) }
      sse(res, [chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: `call_${step}`, type: 'function', function: fn }] }, null), chunk({}, 'tool_calls')])
    })
  })
  await new Promise<void>((r) => model.listen(0, '127.0.0.1', r))
  const modelUrl = `http://127.0.0.1:${(model.address() as AddressInfo).port}/v1`

  const w = await startWarren('sqlite', { env: { ...NO_RATE_LIMITS, WARREN_ALLOW_PRIVATE_MCP: '1', WARREN_IDLE_PAUSE_MS: '600000', WARREN_LOG_LEVEL: 'warn' } })
  try {
    const c = client(w, await newOrg(w))
    const cred = await c.call('POST', '/v1/model-credentials', { provider: 'openai', api_key: 'sk-bench-tools-0123456789', base_url: modelUrl, models: ['m'] })
    if (cred.statusCode !== 201) throw new Error(`model credential: ${cred.statusCode} ${cred.body}`)
    const sid = await c.session({ tools: [{ type: 'mcp', name: 'docs', url: server.url }] })
    const gaps: Record<Kind, number[]> = { mcp: [], todo: [] }
    const callsBefore = server.calls.length
    const run = async (k: Kind, measured: boolean) => {
      kind = k
      served = 0
      ended = []
      arrived = []
      const turn = await c.accept(sid, `go (${k})`)
      const settled = await c.settled(sid, turn.id, 60_000)
      if (settled.status !== 'completed') throw new Error(`the ${k} turn ended ${settled.status}: ${JSON.stringify(settled.error)}`)
      if (arrived.length !== STEPS + 1) throw new Error(`the ${k} turn made ${arrived.length} model requests, not ${STEPS + 1}`)
      // Response i ended → request i+1 arrived: step i's tool call and all the service's work around it.
      if (measured) for (let i = SKIP_STEPS; i < STEPS; i++) gaps[k].push(arrived[i + 1]! - ended[i]!)
    }
    // A warm-up turn of each (connects the session's MCP server, starts what starts once).
    await run('mcp', false)
    await run('todo', false)
    for (let t = 0; t < TURNS; t++) {
      const first: Kind = t % 2 === 0 ? 'mcp' : 'todo'
      await run(first, true)
      await run(first === 'mcp' ? 'todo' : 'mcp', true)
    }
    const expected = (TURNS + 1) * STEPS
    if (server.calls.length - callsBefore !== expected) throw new Error(`the MCP server saw ${server.calls.length - callsBefore} calls from the turns, not ${expected}`)

    const inTurn = pct(gaps.mcp, 0.5) - pct(gaps.todo, 0.5)
    console.log(`whole turns on SQLite (the app in this process): ${TURNS} turns of each kind, alternating on one session, ${STEPS} steps of one tool call each;`)
    console.log(`step gap = model response end → next model request (first ${SKIP_STEPS} steps of each turn left out), ${gaps.mcp.length} steps per kind`)
    console.log(`${'step'.padEnd(58)}${'p50'.padStart(10)}${'p90'.padStart(10)}`)
    row('todo_write (items: []), no sandbox, no network', gaps.todo, 0.9)
    row('mcp__docs__search', gaps.mcp, 0.9)
    console.log(`an MCP call inside a turn (mcp step p50 − todo_write step p50): ${inTurn.toFixed(2)} ms, of which the server round trip (direct p50) ${directP50.toFixed(2)} ms`)
    console.log(`added by the service per MCP call in a turn at p50: ${(inTurn - directP50).toFixed(2)} ms  (target ≤ ${TARGET_MS} ms added at p50; a difference of medians, not a median of differences)`)
    console.log(`ratio mcp step / todo_write step at p50: ${(pct(gaps.mcp, 0.5) / pct(gaps.todo, 0.5)).toFixed(2)}`)
  } finally {
    await w.close()
    await new Promise<void>((r) => (model.closeAllConnections(), model.close(() => r())))
  }
}

/** The page both paths browse: a small documentation page (headings, links, a list, a table, a form). */
const SITE = `
const http = require('http')
const items = Array.from({ length: 30 }, (_, i) => '<li><a href="/doc/' + i + '">Section ' + i + '</a>: what section ' + i + ' is about, in a sentence.</li>').join('')
const rows = Array.from({ length: 12 }, (_, i) => '<tr><td>option-' + i + '</td><td>' + (i * 7) + '</td><td>the effect of option ' + i + '</td></tr>').join('')
const page = '<!doctype html><html lang=en><head><meta charset=utf-8><title>Bench page</title><style>body{font-family:sans-serif}</style></head><body>' +
  '<nav><a href="/">Home</a> <a href="/guide">Guide</a> <a href="/api">API</a></nav><main><h1>Bench page</h1>' +
  '<p>A page served by a test host for bench/tools, read the way the browse tool reads any page.</p><h2>Sections</h2><ul>' + items + '</ul>' +
  '<h2>Options</h2><table><thead><tr><th>Name</th><th>Default</th><th>Effect</th></tr></thead><tbody>' + rows + '</tbody></table>' +
  '<h2>Feedback</h2><form><label>Name <input name=n></label> <label>Topic <select name=t><option>docs</option><option>bug</option></select></label> <button type=button>Send</button></form></main></body></html>'
http.createServer((q, s) => {
  if (q.url === '/') return s.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(page)
  s.writeHead(404).end('no')
}).listen(+process.argv[1], '0.0.0.0', () => console.log('ready'))`

/** browse of a test host's page: Playwright on the same Chromium directly, beside browserHub on a session's sandbox. */
async function browser() {
  const why = process.getuid?.() !== 0 ? 'needs root (a network namespace for the test host)' : spawnSync('sh', ['-c', 'command -v ip']).status !== 0 ? 'needs ip' : !chromiumAvailable() ? `no ${CHROMIUM} (scripts/setup.sh installs it)` : null
  if (why) return console.log(`bench/tools --only browser: skipped, ${why}`)

  // The test host: a network namespace on a private /30 of its own, outside the sandboxes' pool (10.213.0.0/16).
  const tag = randomBytes(2).toString('hex')
  const ns = `wb-tools-${tag}`
  const veth = `wbt${tag}`
  const third = 1 + (parseInt(tag, 16) % 250)
  const hostSide = `10.254.${third}.1`
  const siteAddr = `10.254.${third}.2`
  const url = `http://${siteAddr}:8080/`
  let site: ChildProcess | undefined
  let direct: Browser | undefined
  let w: import('../test/harness.ts').Warren | undefined
  let fake: import('../test/fakes/model-server.ts').FakeModelServer | undefined
  let hub: ReturnType<typeof browserHub> | undefined
  try {
    for (const cmd of [`netns add ${ns}`, `link add ${veth} type veth peer name eth0 netns ${ns}`, `addr add ${hostSide}/30 dev ${veth}`, `link set ${veth} up`, `-n ${ns} addr add ${siteAddr}/30 dev eth0`, `-n ${ns} link set eth0 up`]) {
      const r = spawnSync('ip', cmd.split(' '), { encoding: 'utf8' })
      if (r.status !== 0) throw new Error(`ip ${cmd}: ${r.stderr}`)
    }
    site = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', SITE, '8080'], { stdio: ['ignore', 'pipe', 'inherit'] })
    await new Promise<void>((resolve, reject) => {
      site!.stdout!.once('data', () => resolve())
      site!.once('exit', (code) => reject(new Error(`the test host's server exited ${code}`)))
    })

    // The service: the real app, its allowlist naming the test host, whose private address it lets through.
    process.env.WARREN_TEST_DIALECTS ??= 'sqlite'
    const { startWarren } = await import('../test/harness.ts')
    const { NO_RATE_LIMITS, client, newOrg } = await import('../test/turns.helpers.ts')
    const { startModelServer } = await import('../test/fakes/model-server.ts')
    fake = await startModelServer({ models: ['m1'] })
    w = await startWarren('sqlite', {
      env: { ...NO_RATE_LIMITS, WARREN_IDLE_PAUSE_MS: '600000', WARREN_LOG_LEVEL: 'warn', WARREN_SANDBOX_ALLOWED_DOMAINS: siteAddr, WARREN_SANDBOX_ALLOW_PRIVATE: `${siteAddr}/32` },
    })
    const c = client(w, await newOrg(w))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    const ww = w
    const sandbox = () => ww.workspaces.acquire(sid)
    await sandbox()
    hub = browserHub({ log: silentLog })
    const h = hub

    const flags = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-quic']
    const read = async (page: import('playwright-core').Page, path: string) => {
      const out = await browse(page, { url })
      if (out.isError || !out.output.includes('Section 29') || !out.output.includes('option-11')) throw new Error(`${path}: browse did not read the page: ${out.output.slice(0, 400)}`)
    }

    // --- first: from no browser to the first browse result, alternating ------------------------
    type Path = 'direct' | 'service'
    const first: Record<Path, number[]> = { direct: [], service: [] }
    const ready: Record<Path, number[]> = { direct: [], service: [] }
    const starts: Record<Path, () => Promise<void>> = {
      direct: async () => {
        const t = performance.now()
        const b = await chromium.launch({ executablePath: CHROMIUM, args: flags })
        try {
          const page = await b.newPage()
          ready.direct.push(performance.now() - t)
          await read(page, 'direct')
          first.direct.push(performance.now() - t)
        } finally {
          await b.close()
        }
      },
      service: async () => {
        const t = performance.now()
        try {
          const page = await h.page(sid, sandbox)
          ready.service.push(performance.now() - t)
          await read(page, 'service')
          first.service.push(performance.now() - t)
        } finally {
          await h.close(sid)
        }
      },
    }
    for (let i = 0; i < STARTS; i++) for (const p of (i % 2 === 0 ? ['direct', 'service'] : ['service', 'direct']) as Path[]) await starts[p]()

    // --- warm: browse after browse on the running browser, interleaved rounds --------------------
    direct = await chromium.launch({ executablePath: CHROMIUM, args: flags })
    const pages = { direct: await direct.newPage(), service: await h.page(sid, sandbox) }
    const warm: Record<Path, number[]> = { direct: [], service: [] }
    for (const p of ['direct', 'service'] as Path[]) for (let i = 0; i < 5; i++) await read(pages[p], p)
    const perRound = Math.ceil(BROWSES / BROWSE_ROUNDS)
    for (let round = 0; round < BROWSE_ROUNDS; round++) {
      for (const p of (round % 2 === 0 ? ['direct', 'service'] : ['service', 'direct']) as Path[]) {
        for (let i = 0; i < perRound; i++) {
          const t = performance.now()
          await read(pages[p], p)
          warm[p].push(performance.now() - t)
        }
      }
    }

    const med = (xs: number[]) => pct(xs, 0.5)
    const sec = (x: number) => `${x.toFixed(1)} ms`.padStart(12)
    const range = (xs: number[]) => `${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)} ms`
    console.log(`bench/tools --only browser: browse of ${url} (a test host in a network namespace, no-store), the same browse() on both paths;`)
    console.log(`first: ${STARTS} starts per path, alternating, the sandbox already running (sandbox limits: ${w.config.sandboxCpus} CPU, ${w.config.sandboxMemoryMb} MiB);`)
    console.log(`warm: ${warm.direct.length} browses per path on the running browser after 5 warm-up, ${BROWSE_ROUNDS} interleaved rounds`)
    console.log(`${'first (no browser → first browse result)'.padEnd(58)}${'median'.padStart(12)}${'ready'.padStart(12)}   range`)
    const firstRow = (label: string, p: Path) => console.log(`${label.padEnd(58)}${sec(med(first[p]))}${sec(med(ready[p]))}   ${range(first[p])}`)
    firstRow('direct: chromium.launch, newPage, browse (baseline)', 'direct')
    firstRow('service: browserHub.page (start in sandbox, CDP), browse', 'service')
    console.log('(ready: the median time until there was a page to browse: launched, or started in the sandbox and connected)')
    console.log(`${'warm browse'.padEnd(58)}${'p50'.padStart(12)}${'p90'.padStart(12)}${'p99'.padStart(12)}`)
    const warmRow = (label: string, p: Path) => console.log(`${label.padEnd(58)}${sec(pct(warm[p], 0.5))}${sec(pct(warm[p], 0.9))}${sec(pct(warm[p], 0.99))}`)
    warmRow('direct: Playwright on the host, no proxy (baseline)', 'direct')
    warmRow('service: the sandbox\'s Chromium over CDP, egress proxy', 'service')
    if (warm.direct.length < 100) console.log(`(p99 of ${warm.direct.length} browses is the slowest one or two: --browses 200 for a steadier tail)`)
    console.log(`first: service − direct ${(med(first.service) - med(first.direct)).toFixed(0)} ms, ratio service / direct ${(med(first.service) / med(first.direct)).toFixed(2)}`)
    console.log(`warm: added by the service at p50 ${(pct(warm.service, 0.5) - pct(warm.direct, 0.5)).toFixed(1)} ms, ratio service / direct at p50 ${(pct(warm.service, 0.5) / pct(warm.direct, 0.5)).toFixed(2)}   at p99 ${(pct(warm.service, 0.99) / pct(warm.direct, 0.99)).toFixed(2)}`)
  } finally {
    await direct?.close().catch(() => {})
    await hub?.closeAll().catch(() => {})
    await w?.close().catch((err: Error) => console.error(`closing the app: ${err.message}`))
    await fake?.close().catch(() => {})
    site?.kill('SIGKILL')
    spawnSync('ip', ['link', 'del', veth], { stdio: 'ignore' })
    spawnSync('ip', ['netns', 'del', ns], { stdio: 'ignore' })
  }
}

if (only === null || only === 'mcp') await mcp()
if (only === null) console.log('')
if (only === null || only === 'browser') await browser()
