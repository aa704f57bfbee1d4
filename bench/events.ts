// bench/events: what following a session costs.
//   1. Replay of 50,000 persisted events through one stream (cursor 0), beside a plain SELECT of
//      the same rows from the same store. Target: under 2 s.
//   2. Commit-to-client latency with 20 open streams, beside a bare SSE server in this process
//      that writes the same frames to 20 connections. Target: p99 under 50 ms.
//   3. Signed webhook deliveries a second from the outbox to a local HTTPS receiver, beside plain
//      HTTPS posts of the same bodies over the same number of keep-alive sockets, in alternating
//      rounds (the machine's load changes between them): the median ratio. Target: ≥ 0.6×.
// Usage: node_modules/.bin/node bench/events.ts [--events N] [--fanout N] [--deliveries N] [--rounds N]
//
// The service runs in this process (SQLite, the real app and routes), so that the writer can
// commit events through the same transaction path the runner uses and stamp them just before;
// the readers run in a child process (bench/events-reader.ts) on the other core.
import { fork, execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import tls from 'node:tls'
import os from 'node:os'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { assemble } from '../src/assemble.ts'
import { loadConfig } from '../src/config.ts'
import { withEvents } from '../src/events/record-event.ts'
import { secretBox } from '../src/shared/secret-box.ts'
import { ensureOrg, insertToken } from '../src/tokens/tokens.store.ts'
import { SCOPES } from '../src/tokens/scopes.ts'
import { DELIVERY_LIMITS, deliveryWorker } from '../src/webhooks/delivery-worker.ts'
import { deliveryBody, signDelivery } from '../src/webhooks/delivery-body.ts'
import { makeTestCert } from '../test/fakes/test-cert.ts'
import { waitFor } from '../test/fixtures.ts'
import { localKind } from '../src/sandbox/local/local-kind.ts'


const arg = (name: string, def: number) => Number(process.argv[process.argv.indexOf(name) + 1]) || def
const REPLAY = arg('--events', 50_000)
const FANOUT_EVENTS = arg('--fanout', 300)
const DELIVERIES = arg('--deliveries', 3000)
const ROUNDS = arg('--rounds', 5)
const STREAMS = 20
const root = path.resolve(import.meta.dirname, '..')

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!
const ms = (x: number) => `${x.toFixed(2)} ms`
const now = () => performance.timeOrigin + performance.now()

const canPin = os.cpus().length >= 2 && fs.existsSync('/usr/bin/taskset')
if (canPin) execFileSync('taskset', ['-cp', '0', String(process.pid)], { stdio: 'ignore' })

// --- the service, in this process ---------------------------------------------------------
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-events-'))
const config = loadConfig({ WARREN_DATA_DIR: dataDir, PORT: '0', WARREN_RATE_GENERAL_PER_MIN: '100000000', WARREN_LOG_LEVEL: 'warn', WARREN_ALLOW_PRIVATE_WEBHOOKS: '1', WARREN_METRICS_PORT: 'main' })
const cert = makeTestCert()
// The delivery worker stays stopped until part 3 starts it: it measures an outbox drained from a standing start.
const service = await assemble(config, { box: secretBox(randomBytes(32)), providers: { local: localKind({ prefix: 'be', uidBase: 396_000, uidCount: 1000 }) }, webhookCa: cert.cert, deliveries: false, logger: false })
await service.start({ listen: { host: '127.0.0.1', port: 0 } })
const { store, bus } = service
const base = `http://127.0.0.1:${(service.app.server.address() as AddressInfo).port}`
const org = await ensureOrg(store.db, 'bench-events')
const tokens = await Promise.all([0, 1, 2, 3].map(async () => (await insertToken(store.db, { orgId: org.id, name: null, scopes: [...SCOPES], days: 7 })).secret))

const reader = fork(path.join(root, 'bench/events-reader.ts'), { stdio: 'inherit' })
if (canPin) execFileSync('taskset', ['-cp', '1', String(reader.pid)], { stdio: 'ignore' })
/** The reader's next message of this kind. */
const next = <T>(kind: string): Promise<T> =>
  new Promise((resolve) => {
    const on = (m: { kind: string }) => {
      if (m.kind !== kind) return
      reader.off('message', on)
      resolve(m as T)
    }
    reader.on('message', on)
  })
const ask = <T>(job: Record<string, unknown>, onReady?: () => Promise<void>): Promise<T> =>
  new Promise((resolve) => {
    const on = (m: { kind: string }) => {
      if (m.kind === 'ready') return void onReady?.()
      reader.off('message', on)
      resolve(m as T)
    }
    reader.on('message', on)
    reader.send(job)
  })

try {
  // --- 1. replay -----------------------------------------------------------------------------
  const filler = 'x'.repeat(80)
  for (let i = 0; i < REPLAY; i += 1000) {
    const rows = Array.from({ length: Math.min(1000, REPLAY - i) }, (_, k) => ({
      org_id: org.id,
      session_id: 'ses_bench',
      turn_id: null,
      type: 'agent.message',
      created_at: Date.now(),
      payload: JSON.stringify({ text: `event ${i + k} ${filler}` }),
    }))
    await store.db.insertInto('events').values(rows).execute()
  }
  let t = now()
  const raw = await store.db.selectFrom('events').selectAll().where('org_id', '=', org.id).orderBy('seq').execute()
  const rawMs = now() - t
  if (raw.length !== REPLAY) throw new Error(`expected ${REPLAY} rows, read ${raw.length}`)
  const replay = await ask<{ ms: number; got: number }>({ kind: 'replay', url: `${base}/v1/events`, token: tokens[0], expect: REPLAY })
  console.log(`bench/events on SQLite${canPin ? ', service on core 0, readers on core 1' : ''}`)
  console.log(`replay of ${REPLAY} events through one stream   ${ms(replay.ms)}  (${Math.round((REPLAY / replay.ms) * 1000)} events/s; target < 2000 ms)`)
  console.log(`plain SELECT of the same rows               ${ms(rawMs)}`)
  console.log(`replay / SELECT                             ${(replay.ms / rawMs).toFixed(2)}`)

  // --- 2. fan-out ----------------------------------------------------------------------------
  const urls = Array.from({ length: STREAMS }, (_, i) => ({ url: `${base}/v1/events`, token: tokens[i % tokens.length]! }))
  const write = async () => {
    for (let i = 0; i < FANOUT_EVENTS; i++) {
      const stamp = now()
      await withEvents(store, bus, (_trx, record) => record({ orgId: org.id, sessionId: 'ses_bench', type: 'agent.message', payload: { text: `fan-out ${stamp}` } }))
      await sleep(2)
    }
  }
  const warren = await ask<{ latencies: number[] }>({ kind: 'fanout', urls, expect: STREAMS * FANOUT_EVENTS }, write)

  // The baseline: a bare SSE server writing one frame to 20 connections, same events, same pace.
  const conns: http.ServerResponse[] = []
  const bare = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('retry: 2000\n\n')
    conns.push(res)
  })
  await new Promise<void>((r) => bare.listen(0, '127.0.0.1', r))
  const bareUrl = `http://127.0.0.1:${(bare.address() as AddressInfo).port}/`
  let seq = 0
  const broadcast = async () => {
    for (let i = 0; i < FANOUT_EVENTS; i++) {
      const frame = `id: ${++seq}\nevent: agent.message\ndata: {"object":"event","type":"agent.message","seq":${seq},"payload":{"text":"fan-out ${now()}"}}\n\n`
      for (const c of conns) c.write(frame)
      await sleep(2)
    }
  }
  const baseline = await ask<{ latencies: number[] }>({ kind: 'fanout', urls: urls.map(() => ({ url: bareUrl, token: 'x' })), expect: STREAMS * FANOUT_EVENTS }, broadcast)
  for (const c of conns) c.destroy()
  bare.close()

  const w = warren.latencies
  const b = baseline.latencies
  console.log(`commit-to-client, ${STREAMS} streams × ${FANOUT_EVENTS} events   p50 ${ms(pct(w, 0.5))}  p90 ${ms(pct(w, 0.9))}  p99 ${ms(pct(w, 0.99))}  (target p99 < 50 ms)`)
  console.log(`bare SSE server, same frames and pace       p50 ${ms(pct(b, 0.5))}  p90 ${ms(pct(b, 0.9))}  p99 ${ms(pct(b, 0.99))}`)
  console.log(`service / bare                              p50 ${(pct(w, 0.5) / pct(b, 0.5)).toFixed(2)}  p99 ${(pct(w, 0.99) / pct(b, 0.99)).toFixed(2)}`)

  // --- 3. webhook deliveries ------------------------------------------------------------------
  // Two set-ups, each against plain posts over as many sockets as the worker may use in it: one
  // subscription (its lane holds at most DELIVERY_LIMITS.perSubscription attempts in flight), and
  // enough subscriptions to fill the process's DELIVERY_LIMITS.total.
  const listening = next<{ port: number }>('listening')
  reader.send({ kind: 'receive', cert: cert.cert, key: cert.key, expect: DELIVERIES })
  const { port } = await listening
  const subscribe = async (url: string, type: string) => {
    const created = await fetch(`${base}/v1/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tokens[0]}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url, events: [type] }),
    })
    if (created.status !== 201) throw new Error(`subscribing: ${created.status} ${await created.text()}`)
    return ((await created.json()) as { secret: string }).secret
  }
  const lanes = DELIVERY_LIMITS.total / DELIVERY_LIMITS.perSubscription
  const setups = [
    { name: 'one subscription', type: 'session.idle' as const, urls: [`https://127.0.0.1:${port}/hook`], sockets: DELIVERY_LIMITS.perSubscription },
    { name: `${lanes} subscriptions`, type: 'session.working' as const, urls: Array.from({ length: lanes }, (_, i) => `https://127.0.0.1:${port}/hook/${i}`), sockets: DELIVERY_LIMITS.total },
  ].map((s) => ({ ...s, events: Math.ceil(DELIVERIES / s.urls.length), plain: [] as number[], worker: [] as number[] }))
  const secrets = new Map<string, string>()
  for (const s of setups) for (const url of s.urls) secrets.set(url, await subscribe(url, s.type))

  // The baseline: the same bodies, signed the same way, posted over keep-alive sockets.
  // One secure context for the agent, as the worker makes it: a `ca` option would be re-read on every request.
  const body = deliveryBody({ type: 'session.idle', createdAt: Date.now(), sessionId: 'ses_bench', turnId: null, payload: { session_id: 'ses_bench' } })
  const secureContext = tls.createSecureContext({ ca: [...tls.rootCertificates, cert.cert] })
  const post = (agent: https.Agent, url: string) =>
    new Promise<void>((resolve, reject) => {
      const ts = String(Date.now())
      const req = https.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'x-service-timestamp': ts, 'x-service-signature': signDelivery(secrets.get(url)!, ts, body) } }, (res) => {
        res.resume()
        res.on('end', resolve)
      })
      req.on('error', reject)
      req.end(body)
    })
  const receive = async (expect: number) => {
    const ready = next<{ port: number }>('listening')
    reader.send({ kind: 'receive', cert: cert.cert, key: cert.key, expect })
    await ready
  }
  const postAll = async (s: (typeof setups)[number]) => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: s.sockets, secureContext })
    await receive(s.events * s.urls.length)
    const received = next<{ ms: number }>('received')
    const start = now()
    let left = s.events * s.urls.length
    await Promise.all(Array.from({ length: s.sockets }, async (_, i) => {
      while (left-- > 0) await post(agent, s.urls[i % s.urls.length]!)
    }))
    await received
    const took = now() - start
    agent.destroy()
    return took
  }
  /** The service: the deliveries wait in the outbox (one per subscription and committed event), then a worker starts. */
  let delivered = 0
  const drain = async (s: (typeof setups)[number]) => {
    for (let i = 0; i < s.events; i += 500) {
      await withEvents(store, bus, async (_trx, record) => {
        for (let k = i; k < Math.min(s.events, i + 500); k++) await record({ orgId: org.id, sessionId: 'ses_bench', type: s.type, payload: { session_id: 'ses_bench', status: 'idle' } })
      })
    }
    const n = s.events * s.urls.length
    await receive(n)
    const received = next<{ ms: number }>('received')
    // The service's own worker, made afresh each round (a closed worker does not start again).
    const worker = deliveryWorker({ store, bus, config, box: service.box, ca: cert.cert })
    const start = now()
    worker.start()
    await received
    const took = now() - start
    delivered += n
    // Every delivery was recorded as delivered, not only sent.
    await waitFor('every delivery recorded as delivered', async () => {
      const row = await store.db.selectFrom('webhook_deliveries').select((eb) => eb.fn.countAll<number>().as('n')).where('status', '=', 'delivered').executeTakeFirst()
      return Number(row?.n) === delivered
    })
    await worker.close()
    return took
  }
  // Once to warm the sockets and the JIT, as the worker is warm from the first part.
  for (const s of setups) await postAll(s)
  // Alternating, so that a change in the machine's load falls on both sides of a ratio.
  for (let round = 0; round < ROUNDS; round++) {
    for (const s of setups) {
      s.plain.push(await postAll(s))
      s.worker.push(await drain(s))
    }
  }
  const rate = (n: number, ms: number) => Math.round((n / ms) * 1000)
  const median = (xs: number[]) => pct(xs, 0.5)
  for (const s of setups) {
    const n = s.events * s.urls.length
    const ratios = s.plain.map((p, i) => p / s.worker[i]!)
    console.log(`webhook deliveries, ${s.name.padEnd(17)} ${rate(n, median(s.worker))}/s  (median of ${ROUNDS} rounds of ${n}: ${s.worker.map((w) => rate(n, w)).join(', ')})`)
    console.log(`plain signed HTTPS posts, ${String(s.sockets).padStart(2)} sockets       ${rate(n, median(s.plain))}/s  (${s.plain.map((p) => rate(n, p)).join(', ')})`)
    console.log(`service / plain, median of the rounds     ${median(ratios).toFixed(2)}  (${ratios.map((r) => r.toFixed(2)).join(', ')}; target ≥ 0.6)`)
  }
} finally {
  reader.kill()
  await service.close()
  cert.remove()
  fs.rmSync(dataDir, { recursive: true, force: true })
}
