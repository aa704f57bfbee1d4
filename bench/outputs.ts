// bench/outputs: what publishing a turn's files costs, and what serving a preview costs.
//   1. Publication speed in MiB/s: the files of a turn published through the service's own path
//      (publishTurn: link-refusing open, sha256, content-addressed copy, records and events in one
//      transaction) beside a plain copy of the same files with fs.copyFile in the same run.
//   2. Preview proxy: small GETs to a site the agent started in its sandbox, through the service's
//      preview proxy (its own address, Host `{subdomain}.{preview domain}`) beside the same GETs
//      sent directly to the workspace port at the address the proxy itself reaches it (the
//      sandbox's veth address). Latency p50/p99 of sequential requests on one keep-alive
//      connection, and requests/s with 16 concurrent keep-alive connections; with, for reference,
//      the same through the plainest Node proxy (http.createServer + http.request) and through a
//      TCP relay that reads no HTTP at all (the floor of any proxy in user space), both in the
//      service's process, and the service process's CPU time per request under load.
//      Target: proxy p50 at most 1.5× the direct p50. A connection-level relay would come close to
//      it, but the preview proxy routes every request by its own Host: a reverse proxy in front
//      (nginx, Caddy) pools connections across Hosts, and a relay would send one preview's (or the
//      API's, token included) requests into another's workspace.
// Usage: node_modules/.bin/node bench/outputs.ts [--only publication|preview] [--mib N] [--files N]
//          [--requests N] [--seconds N] [--paths direct,proxy]
//   --mib, --files: publication size (default 256 MiB in 16 files);
//   --requests: sequential requests per path for the latency (default 2000);
//   --seconds: measured seconds per path for the throughput (default 6);
//   --paths: only these of direct, relay, bare and proxy (direct is always measured), for a
//     profile of one path: node --cpu-prof bench/outputs.ts --only preview --paths proxy.
//
// The preview half needs root (the sandboxes' network namespaces). The service runs in this
// process (the test harness: SQLite, the real app, real sandboxes); the requests come from a child
// process (bench/outputs-client.ts) so that the client's work never shares the proxy's event loop.
// With two cores or more the service is pinned to core 0 and the client to core 1; the site in
// the sandbox is started before that pinning and may run on either core.
import { fork, execFileSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { openStore } from '../src/db/database.ts'
import { memoryEventBus } from '../src/events/event-bus.ts'
import { withEvents } from '../src/events/record-event.ts'
import { localBlobStore } from '../src/artifacts/blob-store.ts'
import { publishTurn } from '../src/artifacts/publish-turn.ts'
import type { WorkspaceManager } from '../src/workspaces/workspace-manager.ts'
import { workspaceReader } from '../src/sandbox/local/workspace-files.ts'

const arg = (name: string, def: number) => Number(process.argv[process.argv.indexOf(name) + 1]) || def
const only = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1] : null
if (only !== null && only !== 'publication' && only !== 'preview') throw new Error('--only takes publication or preview')
const MIB_TOTAL = arg('--mib', 256)
const FILES = arg('--files', 16)
const ROUNDS = 3
const MIB = 1024 * 1024
const REQUESTS = arg('--requests', 2000)
const SECONDS = arg('--seconds', 6)
/** The concurrent keep-alive connections of the throughput figure. */
const CONNECTIONS = 16
/** Each path is measured in this many turns, rotating with the others, so drift hits all alike. */
const PREVIEW_ROUNDS = 3
const SITE_PORT = 3000
/** The small answer measured: the fixture site's JSON echo of the request (a few hundred bytes). */
const SMALL_PATH = '/small-echo'

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!

if (only !== 'preview') await publication()
if (only === null) console.log()
if (only !== 'publication') await preview()

async function publication() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-outputs-'))
  const store = await openStore({ dataDir })
  const bus = memoryEventBus()
  const workspaceRoot = path.join(dataDir, 'workspaces')
  // Only the reads of a session's workspace are asked of the workspace manager when publishing.
  const workspaces = { files: (id: string) => workspaceReader(path.join(workspaceRoot, id)) } as WorkspaceManager
  const mibps = (ms: number) => (MIB_TOTAL / ms) * 1000

  const times = { publish: [] as number[], copy: [] as number[], hash: [] as number[] }
  try {
    for (let round = 0; round < ROUNDS; round++) {
      // Fresh random files each round, so content addressing never finds them already stored.
      const sessionId = `ses_bench${round}`
      const dir = path.join(workspaceRoot, sessionId)
      fs.mkdirSync(path.join(dir, 'out'), { recursive: true })
      const turnId = `trn_bench${round}`
      const size = Math.floor((MIB_TOTAL * MIB) / FILES)
      await withEvents(store, bus, async (trx, record) => {
        await trx
          .insertInto('turns')
          .values({ id: turnId, session_id: sessionId, org_id: 'org_bench', ordinal: 1, status: 'completed', text: '', created_at: Date.now(), started_at: null, completed_at: Date.now(), error: null, artifacts: 'pending', artifacts_skipped: '[]', cancel_requested: 0, steps: 0, running_call: null, queued_position: null })
          .execute()
        await trx.insertInto('sessions').values(sessionRow(sessionId)).execute()
        for (let i = 0; i < FILES; i++) {
          fs.writeFileSync(path.join(dir, 'out', `f${i}.bin`), randomBytes(size))
          await record({ orgId: 'org_bench', sessionId, turnId, type: 'file.changed', payload: { path: `out/f${i}.bin`, kind: 'created' } })
        }
      })
      const blobs = localBlobStore(path.join(dataDir, `blobs${round}`))
      let t = performance.now()
      await publishTurn({ store, bus, workspaces, blobs }, { id: turnId, session_id: sessionId, org_id: 'org_bench' })
      times.publish.push(performance.now() - t)
      const state = await store.db.selectFrom('turns').select('artifacts').where('id', '=', turnId).executeTakeFirstOrThrow()
      if (state.artifacts !== 'ready') throw new Error(`publication ended ${state.artifacts}`)

      const plain = path.join(dataDir, `plain${round}`)
      fs.mkdirSync(plain)
      t = performance.now()
      for (let i = 0; i < FILES; i++) await fs.promises.copyFile(path.join(dir, 'out', `f${i}.bin`), path.join(plain, `f${i}.bin`))
      times.copy.push(performance.now() - t)

      // What any publication must do at least: read every byte once through sha256.
      t = performance.now()
      for (let i = 0; i < FILES; i++) {
        const h = createHash('sha256')
        for await (const chunk of fs.createReadStream(path.join(dir, 'out', `f${i}.bin`), { highWaterMark: MIB })) h.update(chunk)
        h.digest()
      }
      times.hash.push(performance.now() - t)
    }
    const p = median(times.publish)
    const c = median(times.copy)
    console.log(`bench/outputs: publication of ${FILES} files, ${MIB_TOTAL} MiB in all, median of ${ROUNDS} rounds`)
    console.log(`publishTurn (open, sha256, blob copy, records)   ${p.toFixed(1)} ms  ${mibps(p).toFixed(0)} MiB/s`)
    console.log(`plain fs.copyFile of the same files              ${c.toFixed(1)} ms  ${mibps(c).toFixed(0)} MiB/s`)
    const h = median(times.hash)
    console.log(`sha256 of the same files, nothing written         ${h.toFixed(1)} ms  ${mibps(h).toFixed(0)} MiB/s`)
    console.log(`publication / plain copy (speed)                 ${(c / p).toFixed(2)}`)
    console.log(`publication / sha256 alone (speed)               ${(h / p).toFixed(2)}`)
  } finally {
    await store.close()
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}

async function preview() {
  // Imported here: the publication half alone needs none of the service.
  const { startWarren } = await import('../test/harness.ts')
  const { startModelServer } = await import('../test/fakes/model-server.ts')
  const { NO_RATE_LIMITS, client, newOrg } = await import('../test/turns.helpers.ts')
  const { agentRuns, startSiteCommand } = await import('../test/previews.helpers.ts')

  // A long idle pause: the workspace is never paused in the middle of a measurement.
  const w = await startWarren('sqlite', { env: { ...NO_RATE_LIMITS, WARREN_IDLE_PAUSE_MS: '600000', WARREN_LOG_LEVEL: 'warn' } })
  const fake = await startModelServer({ models: ['m1'] })
  let reader: ReturnType<typeof fork> | null = null
  let bare: http.Server | null = null
  let relay: net.Server | null = null
  try {
    const base = new URL(await w.listen())
    const c = client(w, await newOrg(w))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    // The agent's own bash starts the fixture site on the sandbox's loopback, as in the tests.
    const turn = await agentRuns(c, fake, sid, startSiteCommand(SITE_PORT, '127.0.0.1', 'site'))
    if (turn.status !== 'completed') throw new Error(`the turn starting the site ended ${turn.status}`)
    const published = await c.call('POST', `/v1/sessions/${sid}/preview`, { port: SITE_PORT, subdomain: 'bench' })
    if (published.statusCode !== 200) throw new Error(`publishing the preview: ${published.statusCode} ${published.body}`)

    // The direct path: the workspace port where the proxy itself reaches it.
    const sandbox = await w.workspaces.live(sid)
    if (!sandbox) throw new Error('the session has no running sandbox')
    const workspace = await sandbox.resolvePreview(SITE_PORT)
    // The local provider's target is an address; the direct paths below dial it.
    if (!('host' in workspace)) throw new Error(`the preview target is not an address: ${workspace.url}`)
    // A reference beside them: the plainest Node proxy, in this same process, to the same port
    // (no Host lookup, no workspace bookkeeping, no header rewriting beyond the hop-by-hop ones).
    const hop = (h: http.IncomingHttpHeaders) => {
      const { connection: _c, 'keep-alive': _k, 'transfer-encoding': _t, ...rest } = h
      return rest
    }
    const bareAgent = new http.Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64 })
    bare = http.createServer((req, res) => {
      const upstream = http.request({ host: workspace.host, port: workspace.port, method: req.method, path: req.url, headers: hop(req.headers), agent: bareAgent }, (answer) => {
        res.writeHead(answer.statusCode!, hop(answer.headers))
        answer.pipe(res)
      })
      upstream.on('error', () => res.destroy())
      req.pipe(upstream)
    })
    await new Promise<void>((r) => bare!.listen(0, '127.0.0.1', r))
    // The floor of any proxy in user space: a TCP relay that does not even read HTTP.
    relay = net.createServer((socket) => {
      const upstream = net.connect({ host: workspace.host, port: workspace.port })
      upstream.setNoDelay(true)
      socket.setNoDelay(true)
      socket.pipe(upstream).pipe(socket)
      const end = () => (socket.destroy(), upstream.destroy())
      socket.on('error', end).on('close', end)
      upstream.on('error', end).on('close', end)
    })
    await new Promise<void>((r) => relay!.listen(0, '127.0.0.1', r))
    const targets = {
      direct: { host: workspace.host, port: workspace.port, path: SMALL_PATH },
      bare: { host: '127.0.0.1', port: (bare.address() as AddressInfo).port, path: SMALL_PATH },
      relay: { host: '127.0.0.1', port: (relay.address() as AddressInfo).port, path: SMALL_PATH },
      proxy: { host: base.hostname, port: Number(base.port), hostHeader: `bench.${w.config.previewDomain}`, path: SMALL_PATH },
    }

    // Pinned only now: the site's process (a child of the sandbox) keeps every core.
    const canPin = os.cpus().length >= 2 && fs.existsSync('/usr/bin/taskset')
    if (canPin) execFileSync('taskset', ['-cp', '0', String(process.pid)], { stdio: 'ignore' })
    const child = fork(path.join(import.meta.dirname, 'outputs-client.ts'), { stdio: 'inherit' })
    reader = child
    if (canPin) execFileSync('taskset', ['-cp', '1', String(child.pid)], { stdio: 'ignore' })
    const ask = <T>(job: Record<string, unknown>): Promise<T> =>
      new Promise((resolve, reject) => {
        child.once('message', (m: { kind: string; message?: string }) => (m.kind === 'error' ? reject(new Error(m.message)) : resolve(m as T)))
        child.send(job)
      })
    /** The service process's CPU time (user and system, µs) while `f` runs. */
    const cpu = async <T>(f: () => Promise<T>): Promise<[T, number]> => {
      const before = process.cpuUsage()
      const out = await f()
      const used = process.cpuUsage(before)
      return [out, used.user + used.system]
    }

    type Path = keyof typeof targets
    const asked = process.argv.includes('--paths') ? process.argv[process.argv.indexOf('--paths') + 1]!.split(',') : null
    const paths = (['direct', 'relay', 'bare', 'proxy'] as Path[]).filter((p) => p === 'direct' || !asked || asked.includes(p))
    const fig = () => ({ latencies: [] as number[], requests: 0, ms: 0, cpuUs: 0, cpuRequests: 0 })
    const figs: Record<Path, ReturnType<typeof fig>> = { direct: fig(), relay: fig(), bare: fig(), proxy: fig() }
    const WARMUP = 200
    const count = Math.ceil(REQUESTS / PREVIEW_ROUNDS)
    for (let round = 0; round < PREVIEW_ROUNDS; round++) {
      // Rotate which path goes first.
      const order = [...paths.slice(round % paths.length), ...paths.slice(0, round % paths.length)]
      for (const p of order) {
        const [l] = await cpu(() => ask<{ latencies: number[]; sockets: number }>({ kind: 'latency', target: targets[p], warmup: WARMUP, count }))
        if (l.sockets !== 1) throw new Error(`${p}: the sequential requests took ${l.sockets} connections (keep-alive broken)`)
        figs[p].latencies.push(...l.latencies)
      }
      for (const p of order) {
        const [t, us] = await cpu(() => ask<{ requests: number; total: number; ms: number; sockets: number }>({ kind: 'throughput', target: targets[p], connections: CONNECTIONS, warmupMs: 300, ms: (SECONDS * 1000) / PREVIEW_ROUNDS }))
        if (t.sockets > CONNECTIONS) throw new Error(`${p}: ${t.sockets} connections for ${CONNECTIONS} (keep-alive broken)`)
        figs[p].requests += t.requests
        figs[p].ms += t.ms
        figs[p].cpuUs += us
        figs[p].cpuRequests += t.total
      }
    }
    const size = (await (await fetch(`http://${workspace.host}:${workspace.port}${SMALL_PATH}`)).arrayBuffer()).byteLength

    const p50 = (p: Path) => pct(figs[p].latencies, 0.5)
    const p99 = (p: Path) => pct(figs[p].latencies, 0.99)
    const rps = (p: Path) => (figs[p].requests / figs[p].ms) * 1000
    const cpuPer = (p: Path) => figs[p].cpuUs / figs[p].cpuRequests
    const ms = (x: number) => `${x.toFixed(3)} ms`.padEnd(12)
    const row = (label: string, p: Path) =>
      console.log(`${label.padEnd(42)}${ms(p50(p))}${ms(p99(p))}${String(Math.round(rps(p))).padEnd(9)}${cpuPer(p).toFixed(0).padStart(5)} µs`)
    console.log(`bench/outputs: preview proxy, GET ${SMALL_PATH} (${size} B answer) to the fixture site in a sandbox${canPin ? '; service on core 0, client on core 1' : ''}`)
    console.log(`  latency: ${figs.direct.latencies.length} sequential requests a path, one keep-alive connection; throughput: ${CONNECTIONS} keep-alive connections, ${SECONDS} s a path`)
    console.log(`${''.padEnd(42)}${'p50'.padEnd(12)}${'p99'.padEnd(12)}${'req/s'.padEnd(9)}service CPU/req`)
    row('direct to the workspace port', 'direct')
    if (paths.includes('proxy')) row('through the preview proxy', 'proxy')
    if (paths.includes('bare')) row('(reference) bare Node proxy, same process', 'bare')
    if (paths.includes('relay')) row('(reference) TCP relay, no HTTP at all', 'relay')
    if (paths.length < 4) return
    console.log(`proxy / direct    p50 ${(p50('proxy') / p50('direct')).toFixed(2)} (target ≤ 1.5)  p99 ${(p99('proxy') / p99('direct')).toFixed(2)}  throughput ${(rps('proxy') / rps('direct')).toFixed(2)}`)
    console.log(`relay / direct    p50 ${(p50('relay') / p50('direct')).toFixed(2)}  (the floor of a proxy in user space on this machine)`)
    console.log(`proxy / bare      p50 ${(p50('proxy') / p50('bare')).toFixed(2)}  p99 ${(p99('proxy') / p99('bare')).toFixed(2)}  throughput ${(rps('proxy') / rps('bare')).toFixed(2)}`)
  } finally {
    reader?.kill()
    bare?.close()
    relay?.close()
    await w.close()
    await fake.close()
  }
}

/** A session row as far as publication reads it (it exists and is not deleted). */
function sessionRow(id: string) {
  const now = Date.now()
  return { id, org_id: 'org_bench', status: 'idle', created_at: now, updated_at: now, title: '', source: null, created_by_token: 'tok_bench', metadata: '{}', agent: '{}', model_credential_id: null, environment: '{}', preview: '{}', input: null, deleted_at: null }
}
