// bench/scale: several `warren serve` nodes on one PostgreSQL (issue 15), on this machine.
// Usage: node_modules/.bin/node bench/scale.ts [--seconds N] [--kills N] [--sessions N]
// (defaults 5 s windows, 10 kills, 12 sessions in parallel; needs PostgreSQL at 127.0.0.1:5432)
//
// The nodes are real child processes started by test/cluster.ts (each its own data folder, sandbox
// prefix, subnet and uid range; one schema, one encryption key). It measures, with 1, 2 and 3
// nodes, turns a second (a fake model: one `bash` call per turn, many sessions in parallel) and
// authenticated GETs a second, requests spread round-robin, and the nodes' CPU per turn and per
// GET (their process CPU from /proc over the window): on a machine with fewer cores than nodes
// more nodes cannot add throughput, and CPU per turn is what tells a bigger deployment how it
// scales (a turn's cost includes what follows it settling on PostgreSQL: its workspace snapshot
// and the published file it wrote). Then the takeover time after a SIGKILL of the node owning a session whose model step is
// in flight (beside the node lease), and commit-to-client latency for a stream read from another
// node than the one that commits, beside a stream read from the committing node at the same time.
import os from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import { startCluster, type Cluster } from '../test/cluster.ts'
import { startModelServer, type ModelRequest, type ScriptStep } from '../test/fakes/model-server.ts'
import { openSse, type Frame, type SseClient } from '../test/sse-client.ts'
import { load, type LoadResult } from './load.ts'
import { cpuMs, machineTicks } from './proc-cpu.ts'

const arg = (name: string, dflt: number) => (process.argv.includes(name) ? Number(process.argv[process.argv.indexOf(name) + 1]) || dflt : dflt)
const seconds = arg('--seconds', 5)
const kills = arg('--kills', 10)
const NODES = 3
const SESSIONS = arg('--sessions', 12)
const CONNECTIONS = 24
const LEASE_MS = 3000
const COMMAND = 'echo step >> log.txt'

const pct = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]! : NaN)
const started = Date.now()
const say = (s: string) => process.stderr.write(`[${((Date.now() - started) / 1000).toFixed(0)} s] ${s}\n`)

// --- the model: by the turn's text. `turn …`: one bash call, then a reply; `hang …`: the first ask
// streams forever (its node dies under it), every later ask gets a reply; anything else: a reply.
const fake = await startModelServer({ models: ['m'] })
const asked = new Set<string>()
const lastIsToolResult = (req: ModelRequest) => (req.messages.at(-1) as { role?: string } | undefined)?.role === 'tool'
fake.fallback = (req): ScriptStep => {
  const text = req.lastUserText ?? ''
  const first = !asked.has(text)
  asked.add(text)
  if (text.startsWith('hang ') && first) return { hang: true, text: 'thinking' }
  if (text.startsWith('turn ') && !lastIsToolResult(req)) return { toolCalls: [{ name: 'bash', args: { command: COMMAND } }] }
  return { text: 'done' }
}

const cluster: Cluster = await startCluster({
  nodes: NODES,
  start: [0],
  env: { WARREN_NODE_LEASE_MS: String(LEASE_MS), WARREN_MAX_SESSIONS_PER_ORG: '100000', WARREN_LOG_LEVEL: 'error' },
})

/** A session's stream (or the organization's, for null) read from node `i`, with a callback per frame. */
async function stream(i: number, sessionId: string | null, onFrame: (f: Frame) => void): Promise<SseClient> {
  const c = await openSse(cluster.nodes[i]!.service.url, sessionId ? `/v1/sessions/${sessionId}/events` : '/v1/events', { token: cluster.token, onFrame })
  if (c.status !== 200) throw new Error(`the stream on node ${i} was refused: ${c.status} ${c.body}`)
  return c
}

async function ok(res: Promise<{ status: number; text: string; body: any }>, want: number): Promise<any> {
  const r = await res
  if (r.status !== want) throw new Error(`wanted ${want}, got ${r.status}: ${r.text}`)
  return r.body
}

/** Resolves when a turn.ended frame for `turnId` arrives on a stream fed to `ended`. */
function turnWaiter() {
  const waiting = new Map<string, () => void>()
  const seen = new Set<string>()
  return {
    onFrame(f: Frame) {
      if (f.event !== 'turn.ended') return
      const id = f.data.payload.turnId as string
      seen.add(id)
      waiting.get(id)?.()
    },
    /** Rejects past two minutes: a bench that waits for good tells nobody anything. */
    ended: (turnId: string) =>
      seen.has(turnId)
        ? Promise.resolve()
        : new Promise<void>((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`no turn.ended for ${turnId} within 120 s`)), 120_000)
            waiting.set(turnId, () => {
              clearTimeout(timer)
              resolve()
            })
          }),
  }
}

type Phase = { nodes: number; turns: number; turnsPerSec: number; cpuPerTurnMs: number; turnCores: number; machineBusy: number; idleCores: number; netCpuPerTurnMs: number; get: LoadResult; cpuPerGetUs: number; owners: string }

const nodesCpu = () => cluster.live().reduce((sum, i) => sum + cpuMs(cluster.nodes[i]!.service.pid!), 0)

const IDLE_MS = 2000

async function phase(n: number): Promise<Phase> {
  // What the live nodes burn with nothing to do (heartbeats, lease scans, warm pools): a cost per
  // node, not per turn, that a turn figure divided by fewer turns would otherwise hide.
  const idle0 = nodesCpu()
  await sleep(IDLE_MS)
  const idleCores = (nodesCpu() - idle0) / IDLE_MS
  // Sessions created round-robin: each is owned by the node that created it.
  const sessions: string[] = []
  for (let k = 0; k < SESSIONS; k++) sessions.push((await ok(cluster.api('POST', '/v1/sessions', {}), 201)).id)
  const owners = await cluster.query<{ owner_node: string }>('SELECT owner_node FROM {schema}.sessions WHERE id = ANY($1)', [sessions])
  const waiter = turnWaiter()
  // One organization-wide stream, always on node 0, tells when turns end: a token holds few
  // streams, and a constant reader keeps the nodes' CPU comparable from phase to phase.
  const ends = await stream(0, null, waiter.onFrame)
  let seq = 0
  const oneTurn = async (s: string) => {
    const turn = await ok(cluster.api('POST', `/v1/sessions/${s}/messages`, { text: `turn ${n}-${seq++}` }), 202)
    await waiter.ended(turn.id)
  }
  // One turn each first: the workspace's start and the JIT are not the steady state.
  await Promise.all(sessions.map(oneTurn))
  const cpu0 = nodesCpu()
  const machine0 = machineTicks()
  let machineBusy = 0
  const deadline = performance.now() + seconds * 1000
  let turns = 0
  let cpuAtDeadline = 0
  const t0 = performance.now()
  setTimeout(() => {
    cpuAtDeadline = nodesCpu()
    const m = machineTicks()
    machineBusy = (m.busy - machine0.busy) / (m.total - machine0.total)
  }, seconds * 1000)
  await Promise.all(
    sessions.map(async (s) => {
      while (performance.now() < deadline) {
        await oneTurn(s)
        if (performance.now() <= deadline) turns++
      }
    }),
  )
  const window = Math.min(performance.now(), deadline) - t0
  ends.close()

  // GETs of one session, the load's connections shared evenly among the live nodes.
  const url = (i: number) => `${cluster.nodes[i]!.service.url}/v1/sessions/${sessions[0]}`
  const headers = { authorization: `Bearer ${cluster.token}` }
  const live = cluster.live()
  await Promise.all(live.map((i) => load({ url: url(i), headers, connections: CONNECTIONS / n, seconds: 1 })))
  const g0 = nodesCpu()
  const parts = await Promise.all(live.map((i) => load({ url: url(i), headers, connections: CONNECTIONS / n, seconds })))
  const getCpu = nodesCpu() - g0
  const lat = parts.map((p) => p.p50).sort((a, b) => a - b)
  const get: LoadResult = {
    requests: parts.reduce((a, p) => a + p.requests, 0),
    errors: parts.reduce((a, p) => a + p.errors, 0),
    seconds,
    rps: parts.reduce((a, p) => a + p.rps, 0),
    p50: lat[Math.floor(lat.length / 2)]!,
    p99: Math.max(...parts.map((p) => p.p99)),
  }
  await Promise.allSettled(sessions.map((s) => cluster.api('DELETE', `/v1/sessions/${s}`)))
  const byOwner = new Map<string, number>()
  for (const o of owners) byOwner.set(o.owner_node, (byOwner.get(o.owner_node) ?? 0) + 1)
  return {
    nodes: n,
    turns,
    turnsPerSec: turns / (window / 1000),
    cpuPerTurnMs: (cpuAtDeadline - cpu0) / turns,
    turnCores: (cpuAtDeadline - cpu0) / (seconds * 1000),
    idleCores,
    netCpuPerTurnMs: (cpuAtDeadline - cpu0 - idleCores * seconds * 1000) / turns,
    machineBusy,
    get,
    cpuPerGetUs: (getCpu * 1000) / get.requests,
    owners: [...byOwner.values()].join('/'),
  }
}

type Takeover = { ms: number; ownerMs: number }

/** Kills the node owning a session whose model step is in flight; how long until another node settles the turn. */
async function takeover(victim: number, k: number): Promise<Takeover> {
  const sessionId = (await ok(cluster.on(victim, 'POST', '/v1/sessions', {}), 201)).id as string
  const text = `hang ${k}`
  const turn = await ok(cluster.on(victim, 'POST', `/v1/sessions/${sessionId}/messages`, { text }), 202)
  for (const until = Date.now() + 60_000; !asked.has(text); await sleep(20)) if (Date.now() > until) throw new Error(`the model was never asked for ${text}`)
  const [before] = await cluster.query<{ owner_node: string }>('SELECT owner_node FROM {schema}.sessions WHERE id = $1', [sessionId])
  const t0 = Date.now()
  await cluster.kill(victim, 'SIGKILL')
  let ownerMs = NaN
  for (const until = t0 + 120_000; ; await sleep(25)) {
    const [row] = await cluster.query<{ owner_node: string | null; status: string }>(
      'SELECT s.owner_node, t.status FROM {schema}.sessions s JOIN {schema}.turns t ON t.session_id = s.id WHERE t.id = $1',
      [turn.id],
    )
    if (Number.isNaN(ownerMs) && row!.owner_node && row!.owner_node !== before!.owner_node) ownerMs = Date.now() - t0
    if (row!.status !== 'working' && !Number.isNaN(ownerMs)) {
      if (row!.status !== 'completed') throw new Error(`the taken-over turn ended ${row!.status}`)
      return { ms: Date.now() - t0, ownerMs }
    }
    if (Date.now() > until) throw new Error(`turn ${turn.id} was not taken over within 120 s`)
  }
}

/** Commit-to-client latency of every persisted frame, read from node `a` (which commits) and node `b`, at once. */
async function commitToClient(a: number, b: number): Promise<{ local: number[]; remote: number[]; turns: number }> {
  const sessionId = (await ok(cluster.on(a, 'POST', '/v1/sessions', {}), 201)).id as string
  const local: number[] = []
  const remote: number[] = []
  const waiter = turnWaiter()
  const measure = (into: number[]) => (f: Frame) => {
    if (f.id !== undefined && typeof f.data?.created_at === 'number') into.push(f.receivedAt - f.data.created_at)
  }
  const onA = await stream(a, sessionId, measure(local))
  const onB = await stream(b, sessionId, (f) => {
    measure(remote)(f)
    waiter.onFrame(f)
  })
  let turns = 0
  const deadline = Date.now() + seconds * 1000
  while (Date.now() < deadline) {
    const turn = await ok(cluster.on(a, 'POST', `/v1/sessions/${sessionId}/messages`, { text: `say ${turns}` }), 202)
    await waiter.ended(turn.id)
    turns++
  }
  // The last turn's frames reach A too before the streams close.
  await sleep(200)
  onA.close()
  onB.close()
  await cluster.on(a, 'DELETE', `/v1/sessions/${sessionId}`)
  return { local, remote, turns }
}

const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '-')
const f0 = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : '-')
try {
  await ok(cluster.on(0, 'POST', '/v1/model-credentials', { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m'] }), 201)
  const phases: Phase[] = []
  for (let n = 1; n <= NODES; n++) {
    if (n > 1) await cluster.start(n - 1)
    say(`${n} node(s): turns and GETs`)
    phases.push(await phase(n))
  }

  say('commit-to-client across nodes')
  const lat = await commitToClient(0, 1)

  say(`takeover: ${kills} kills`)
  const takeovers: Takeover[] = []
  const restarting = new Map<number, Promise<void>>()
  for (let k = 0; k < kills; k++) {
    const victim = k % NODES
    await restarting.get(victim)
    takeovers.push(await takeover(victim, k))
    // The killed node comes back while the next one is killed: another node is always live to take over.
    restarting.set(victim, cluster.start(victim))
  }
  await Promise.all(restarting.values())

  const [one] = phases
  const cols = (get: (p: Phase) => number, fmt: (x: number) => string) => phases.map((p) => fmt(get(p)).padStart(10)).join('')
  const ratios = (get: (p: Phase) => number) => phases.slice(1).map((p) => (get(p) / get(one!)).toFixed(2).padStart(10)).join('')
  const row = (name: string, get: (p: Phase) => number, fmt: (x: number) => string) => console.log(`${name.padEnd(42)}${cols(get, fmt)}${ratios(get)}`)
  const cores = os.availableParallelism()
  console.log(`bench/scale: ${NODES} warren serve nodes on one PostgreSQL, this machine (${cores} cores, load average ${os.loadavg()[0]!.toFixed(2)} at the end)`)
  console.log(`${SESSIONS} sessions in parallel per phase, one bash call per turn (fake model); ${CONNECTIONS} GET connections spread evenly over the nodes; ${seconds} s windows; no pinning`)
  console.log(`${''.padEnd(42)}${['1 node', '2 nodes', '3 nodes'].map((h) => h.padStart(10)).join('')}${['2 / 1', '3 / 1'].map((h) => h.padStart(10)).join('')}`)
  row('turns / s', (p) => p.turnsPerSec, f1)
  row('nodes CPU per turn, ms (lower is better)', (p) => p.cpuPerTurnMs, f1)
  row('  less the nodes\' idle CPU, ms per turn', (p) => p.netCpuPerTurnMs, f1)
  row('nodes CPU idle (no sessions), cores', (p) => p.idleCores, (x) => x.toFixed(3))
  row('nodes CPU while turns ran, cores busy', (p) => p.turnCores, (x) => x.toFixed(2))
  row('machine CPU busy while turns ran (all)', (p) => p.machineBusy * 100, (x) => `${x.toFixed(0)}%`)
  row('GET /v1/sessions/{id} / s', (p) => p.get.rps, f0)
  row('GET p50 ms (median node)', (p) => p.get.p50, f1)
  row('GET p99 ms (worst node)', (p) => p.get.p99, f1)
  row('nodes CPU per GET, µs', (p) => p.cpuPerGetUs, f0)
  console.log(`${'sessions per owner node'.padEnd(42)}${phases.map((p) => p.owners.padStart(10)).join('')}`)
  console.log(`${'GET errors'.padEnd(42)}${phases.map((p) => String(p.get.errors).padStart(10)).join('')}`)
  if (cores < NODES) console.log(`note: ${cores} cores for ${NODES} nodes, PostgreSQL, the fake model and this load generator: more nodes cannot add cores here, so turns/s and GET/s cannot grow; CPU per turn and per GET (the nodes' own process time, not the sandboxed commands' or PostgreSQL's) is what a bigger deployment divides its cores by; on a machine this loaded it is inflated by contention (more processes than cores). The machine's busy share counts everything on it (PostgreSQL, the sandboxed commands, this bench, other work): near 100% means the machine, not Warren's nodes, set the pace.`)
  const ms = takeovers.map((t) => t.ms)
  const owner = takeovers.map((t) => t.ownerMs)
  console.log(`takeover after SIGKILL (model step in flight), ${takeovers.length} kills, WARREN_NODE_LEASE_MS ${LEASE_MS}:`)
  console.log(`  kill → turn settled on another node     p50 ${f0(pct(ms, 0.5))} ms  max ${f0(Math.max(...ms))} ms  ratio p50 / lease ${(pct(ms, 0.5) / LEASE_MS).toFixed(2)} (expected ≈ lease + one heartbeat round ${LEASE_MS / 5} ms + one model step)`)
  console.log(`  kill → owner_node changed               p50 ${f0(pct(owner, 0.5))} ms  max ${f0(Math.max(...owner))} ms`)
  console.log(`commit-to-client (event created_at → frame received, ms resolution), ${lat.turns} turns committed through node 0:`)
  console.log(`  stream on node 1 (other node)           p50 ${f1(pct(lat.remote, 0.5))} ms  p99 ${f1(pct(lat.remote, 0.99))} ms  (${lat.remote.length} events)`)
  console.log(`  stream on node 0 (same node, baseline)  p50 ${f1(pct(lat.local, 0.5))} ms  p99 ${f1(pct(lat.local, 0.99))} ms  (${lat.local.length} events)`)
  console.log(`  ratio other / same node                 p50 ${(pct(lat.remote, 0.5) / Math.max(1, pct(lat.local, 0.5))).toFixed(2)}  p99 ${(pct(lat.remote, 0.99) / Math.max(1, pct(lat.local, 0.99))).toFixed(2)}`)
  say('done')
} finally {
  await cluster.close()
  await fake.close()
}
