import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { expectError } from './expect.ts'
import { loadConfig } from '../src/config.ts'
import { forEachDialect, startWarren, useWarren, type Warren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { client, newOrg, NO_RATE_LIMITS } from './turns.helpers.ts'

type Sample = { name: string; labels: Record<string, string>; value: number }

/** The samples of a Prometheus text exposition (what a scraper parses), and its HELP lines by name. */
function parse(text: string): { samples: Sample[]; help: Map<string, string> } {
  const samples: Sample[] = []
  const help = new Map<string, string>()
  for (const line of text.split('\n')) {
    const h = /^# HELP (\S+) (.+)$/.exec(line)
    if (h) help.set(h[1]!, h[2]!)
    if (line === '' || line.startsWith('#')) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    assert.ok(m, `not a sample line: ${line}`)
    const labels: Record<string, string> = {}
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!
    samples.push({ name: m[1]!, labels, value: Number(m[3]) })
  }
  return { samples, help }
}

/** The value of the one sample of `name` whose labels include `labels`; undefined when there is none. */
function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const found = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
  assert.ok(found.length <= 1, `${name} ${JSON.stringify(labels)} matches ${found.length} samples`)
  return found[0]?.value
}

async function scrape(w: Warren): Promise<{ text: string; samples: Sample[]; help: Map<string, string> }> {
  const res = await w.inject({ method: 'GET', url: '/metrics', token: null })
  assert.equal(res.statusCode, 200, res.body)
  assert.match(String(res.headers['content-type']), /^text\/plain; version=0\.0\.4/)
  return { text: res.body, ...parse(res.body) }
}

/** One request over a real socket with a Host header of our choosing (fetch will not send one). */
function requestAs(base: string, host: string, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${base}${path}`, { headers: { host } }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    })
    req.on('error', reject)
  })
}

forEachDialect('metrics', (dialect) => {
  // The delivery worker stays stopped, so that a delivery owed to the subscription below stays owed.
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_ALLOW_PRIVATE_WEBHOOKS: '1', WARREN_METRICS_PORT: 'main' }, deliveries: false })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  it('counts requests by route pattern, the settled turn, its model steps, its tool call and its sandbox, naming no id', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const hook = await c.call('POST', '/v1/webhooks', { url: 'https://127.0.0.1:9/hook', events: ['turn.completed'] })
    assert.equal(hook.statusCode, 201, hook.body)
    const before = await scrape(w())
    const sid = await c.session()
    fake.script({ toolCalls: [{ name: 'bash', args: { command: 'echo hi' } }] }, { text: 'Done.' })
    const turn = await c.accept(sid, 'say hi')
    const done = await c.settled(sid, turn.id)
    assert.equal(done.status, 'completed', JSON.stringify(done))
    await c.getSession(sid)
    await c.turns(sid)
    expectError(await c.call('GET', '/v1/sessions/ses_not_there'), 404, 'not_found')
    expectError(await w().inject({ method: 'GET', url: `/v1/no-such-route/${sid}` }), 404, 'not_found')

    const { text, samples, help } = await scrape(w())
    for (const id of [sid, turn.id, org.orgId, hook.json().id, org.token]) assert.ok(!text.includes(id), `the metrics name ${id}`)

    const requests = (labels: Record<string, string>) => value(samples, 'warren_http_requests_total', labels) ?? 0
    assert.ok(requests({ route: '/v1/sessions/:session_id', method: 'GET', status: '200' }) >= 1)
    assert.ok(requests({ route: '/v1/sessions/:session_id', method: 'GET', status: '404' }) >= 1, 'the refusal is counted under the route, with its status')
    assert.ok(requests({ route: '/v1/sessions/:session_id/messages', method: 'POST', status: '202' }) >= 1)
    assert.ok(requests({ route: 'unmatched', method: 'GET', status: '404' }) >= 1, 'an unrouted path is counted under one name')
    assert.ok((value(samples, 'warren_http_request_duration_seconds_count', { route: '/v1/sessions/:session_id/turns', method: 'GET' }) ?? 0) >= 1)

    const settled = (s: Sample[]) => value(s, 'warren_turns_settled_total', { outcome: 'completed' }) ?? 0
    assert.equal(settled(samples) - settled(before.samples), 1)
    assert.equal(value(samples, 'warren_turns_settled_total', { outcome: 'failed' }), 0, 'every outcome has its series from the start')
    assert.ok((value(samples, 'warren_model_step_duration_seconds_count', { provider: 'openai', result: 'ok' }) ?? 0) >= 2, 'two model steps')
    assert.ok((value(samples, 'warren_tool_call_duration_seconds_count', { tool: 'bash' }) ?? 0) >= 1)

    assert.ok((value(samples, 'warren_sandboxes', { state: 'running' }) ?? 0) >= 1, 'the session has a running sandbox')
    assert.equal(typeof value(samples, 'warren_sandboxes', { state: 'paused' }), 'number')
    assert.ok((value(samples, 'warren_sandbox_start_duration_seconds_count') ?? 0) >= 1)

    // turn.completed was owed to a receiver nobody sends to (the worker is stopped): pending and late.
    assert.ok((value(samples, 'warren_webhook_deliveries', { state: 'pending' }) ?? 0) >= 1)
    assert.equal(typeof value(samples, 'warren_webhook_deliveries', { state: 'dead' }), 'number')
    assert.ok((value(samples, 'warren_event_log_lag_seconds') ?? -1) >= 0)
    for (const name of ['warren_http_requests_total', 'warren_turns_settled_total', 'warren_model_step_duration_seconds', 'warren_sandboxes', 'warren_event_log_lag_seconds', 'warren_lease_takeovers_total', 'warren_event_streams_open']) {
      assert.ok((help.get(name) ?? '').length > 10, `${name} has no HELP`)
    }
    // Node's own, on this service's registry.
    assert.equal(typeof value(samples, 'process_cpu_user_seconds_total'), 'number')
    assert.equal(typeof value(samples, 'nodejs_eventloop_lag_seconds'), 'number')
  })

  it('reads the webhook backlog from the store: a dead delivery and the lag of an overdue one', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const hook = await c.call('POST', '/v1/webhooks', { url: 'https://127.0.0.1:9/other', events: ['session.created'] })
    assert.equal(hook.statusCode, 201, hook.body)
    await c.session()
    await c.session()
    const before = parse((await scrape(w())).text).samples
    const owed = await w().store.db.selectFrom('webhook_deliveries').select('id').where('subscription_id', '=', hook.json().id).execute()
    assert.equal(owed.length, 2)
    // One given up after its last retry; the other fell due a minute ago and nobody sent it.
    await w().store.db.updateTable('webhook_deliveries').set({ status: 'dead', next_attempt_at: null }).where('id', '=', owed[0]!.id).execute()
    await w().store.db.updateTable('webhook_deliveries').set({ next_attempt_at: Date.now() - 60_000 }).where('id', '=', owed[1]!.id).execute()
    const { samples } = await scrape(w())
    assert.equal(value(samples, 'warren_webhook_deliveries', { state: 'dead' })! - value(before, 'warren_webhook_deliveries', { state: 'dead' })!, 1)
    assert.equal(value(samples, 'warren_webhook_deliveries', { state: 'pending' })! - value(before, 'warren_webhook_deliveries', { state: 'pending' })!, -1)
    assert.ok(value(samples, 'warren_event_log_lag_seconds')! >= 60, 'the overdue delivery has waited a minute past its due time')
  })

  it('counts preview-host traffic under route="preview", keeps an open stream in the gauge, and takes the node id and takeovers from the lead', async () => {
    const base = await w().listen()
    const previewHost = `nosuchpreview.${w().config.previewDomain}`
    const status = await requestAs(base, previewHost, `/some/${'x'.repeat(8)}/page`)
    assert.ok(status >= 400, `an unknown preview answers ${status}`)

    const stream = http.get(`${base}/v1/events`, { headers: { authorization: `Bearer ${w().token}` } })
    stream.on('error', () => {})
    const streamsOpen = async () => value((await scrape(w())).samples, 'warren_event_streams_open')
    await waitFor('the stream is counted open', async () => (await streamsOpen()) === 1)
    stream.destroy()
    await waitFor('the closed stream is no longer counted', async () => (await streamsOpen()) === 0)

    // The node names itself when it joins the store; a node that joins again takes its new name.
    assert.equal(value((await scrape(w())).samples, 'warren_node_info', { node_id: w().node.id }), 1)
    const takenBefore = value((await scrape(w())).samples, 'warren_lease_takeovers_total') ?? 0
    w().metrics.setNodeId('node-7f3a')
    w().metrics.leaseTakeovers.inc()
    const { samples } = await scrape(w())
    assert.equal(samples.some((s) => s.name === 'warren_node_info' && s.labels.node_id === w().node.id), false, 'only the current name is shown')
    assert.ok((value(samples, 'warren_http_requests_total', { route: 'preview', method: 'GET' }) ?? 0) >= 1)
    assert.equal(value(samples, 'warren_http_requests_total', { route: '/v1/events', method: 'GET', status: '200' }), 1, 'the stream its client left is counted, once')
    assert.equal(value(samples, 'warren_node_info', { node_id: 'node-7f3a' }), 1)
    assert.equal(value(samples, 'warren_lease_takeovers_total'), takenBefore + 1)
  })

  it('counts a turn working while its model step runs, and its cancel as an outcome, not as a failed model call', async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session()
    const calls = fake.modelRequests.length
    fake.script({ hang: true, text: 'Thinking about' })
    const turn = await c.accept(sid, 'take your time')
    const before = (await scrape(w())).samples
    // Cancelled only once the model holds the call, so that no later test's call takes the hang.
    await fake.waitForModelRequests(calls + 1)
    await waitFor('the turn is counted working', async () => (value((await scrape(w())).samples, 'warren_turns_working') ?? 0) >= 1)
    assert.equal((await c.cancel(sid, turn.id)).statusCode, 200)
    assert.equal((await c.settled(sid, turn.id)).status, 'cancelled')
    await waitFor('the driver lets go', async () => value((await scrape(w())).samples, 'warren_turns_working') === 0)
    const after = (await scrape(w())).samples
    const delta = (name: string, labels: Record<string, string>) => (value(after, name, labels) ?? 0) - (value(before, name, labels) ?? 0)
    assert.equal(delta('warren_turns_settled_total', { outcome: 'cancelled' }), 1)
    assert.equal(delta('warren_model_step_duration_seconds_count', { provider: 'openai', result: 'error' }), 0, 'a cut call is no provider failure')
  })

  it("counts the turns a session's deletion cancels, and a parked turn is not one being driven", async () => {
    const org = await newOrg(w())
    const c = client(w(), org)
    await c.connect(fake, 'openai')
    const sid = await c.session({ agent: { model: 'm1', tools: [{ type: 'function', name: 'lookup_order' }] } })
    fake.script({ toolCalls: [{ name: 'lookup_order', args: { id: 7 } }] })
    await c.accept(sid, 'find order 7')
    await waitFor('the turn parks on the function', async () => (await c.getSession(sid)).status === 'requires_action')
    // The driver lets go just after the session's status moves: a parked turn holds none.
    await waitFor('no turn is being driven', async () => value((await scrape(w())).samples, 'warren_turns_working') === 0)
    const before = (await scrape(w())).samples
    assert.equal((await c.call('DELETE', `/v1/sessions/${sid}`)).statusCode, 200)
    const after = (await scrape(w())).samples
    assert.equal(value(after, 'warren_turns_settled_total', { outcome: 'cancelled' })! - value(before, 'warren_turns_settled_total', { outcome: 'cancelled' })!, 1)
  })

  it('serves /metrics without a token and refuses what it does not read', async () => {
    const res = await w().inject({ method: 'GET', url: '/metrics', token: 'svc_pat_nonsense' })
    assert.equal(res.statusCode, 200, 'a bad token does not stand in the way')
    assert.match(expectError(await w().inject({ method: 'GET', url: '/metrics?format=json', token: null }), 400, 'invalid_request').message, /"format"/)
  })
})

forEachDialect('metrics on their own listener', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_METRICS_PORT: '0' } })

  it('serves /metrics on WARREN_METRICS_PORT and answers 404 for it on the main listener', async () => {
    const own = w().metricsUrl
    assert.ok(own, 'no metrics listener')
    await w().inject({ method: 'GET', url: '/v1/health' })
    const res = await fetch(`${own}/metrics`)
    assert.equal(res.status, 200)
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/)
    const { samples } = parse(await res.text())
    assert.ok((value(samples, 'warren_http_requests_total', { route: '/v1/health', method: 'GET', status: '200' }) ?? 0) >= 1, 'the main listener\'s requests are counted there')

    const elsewhere = await fetch(`${own}/v1/health`)
    assert.equal(elsewhere.status, 404)
    assert.equal(((await elsewhere.json()) as { error: { code: string } }).error.code, 'not_found')
    expectError(await w().inject({ method: 'GET', url: '/metrics', token: null }), 404, 'not_found')
    expectError(await w().inject({ method: 'GET', url: '/metrics' }), 404, 'not_found')
  })
})

it('serves the metrics on a loopback listener of their own unless told otherwise, and refuses a metrics port that is no port', () => {
  assert.throws(() => loadConfig({ WARREN_METRICS_PORT: '70000' }), /WARREN_METRICS_PORT must be a port number/)
  assert.throws(() => loadConfig({ WARREN_METRICS_PORT: 'nine' }), /WARREN_METRICS_PORT must be a port number \(0 to 65535\) or "main"/)
  assert.throws(() => loadConfig({ WARREN_METRICS_PORT: 'main', WARREN_METRICS_HOST: '0.0.0.0' }), /WARREN_METRICS_HOST needs a metrics listener of their own/)
  const c = loadConfig({ WARREN_METRICS_PORT: '9100', WARREN_METRICS_HOST: '0.0.0.0' })
  assert.equal(c.metricsPort, 9100)
  assert.equal(c.metricsHost, '0.0.0.0')
  // Unset: never on the main listener (often public), but on loopback, where a local scraper reaches them.
  const unset = loadConfig({})
  assert.equal(unset.metricsPort, 9464)
  assert.equal(unset.metricsHost, '127.0.0.1')
  assert.equal(loadConfig({ WARREN_METRICS_HOST: '::1' }).metricsPort, 9464)
  assert.equal(loadConfig({ WARREN_METRICS_PORT: 'main' }).metricsPort, undefined, 'main: on the main listener, as asked')
})

it('refuses to start when the metrics port is taken, saying how to choose another', async (t) => {
  const taken = net.createServer()
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve))
  t.after(() => taken.close())
  const port = (taken.address() as AddressInfo).port
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-metrics-'))
  t.after(() => fs.rmSync(dataDir, { recursive: true, force: true }))
  await assert.rejects(startWarren('sqlite', { dataDir, env: { WARREN_METRICS_PORT: String(port) } }), new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port} \\(EADDRINUSE\\).*WARREN_METRICS_PORT.*"main"`))
})
