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
import { browse } from '../src/tools/browser/browser-tools.ts'
import { startFakeMcp, type FakeMcp } from '../test/fakes/mcp-server.ts'

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
    allowPrivate: true,
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
    const guarded = await connect(guardedFetch({ allowPrivate: true }) as typeof globalThis.fetch)
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
  const sse = (res: http.ServerResponse, chunks: unknown[]) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    for (const c of chunks) res.write(`data: ${JSON.stringify(c)}\n\n`)
    res.end('data: [DONE]\n\n', () => ended.push(performance.now()))
  }
  const chunk = (delta: unknown, finish: string | null) => ({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })
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

if (only === null || only === 'mcp') await mcp()
if (only === null) console.log('')
if (only === null || only === 'browser') await browser()
