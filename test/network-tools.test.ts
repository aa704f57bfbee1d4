// The network tools through HTTP: web_fetch reads a test site served on a test host in a network
// namespace this test makes, as readable Markdown, under the workspace's network policy (its
// allowlist, permission rules, never the host's loopback or a private address, redirects judged
// again); web_search and image_search ask a fake SearXNG; which tools are offered follows the
// configuration and the deployment.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import http from 'node:http'
import fs from 'node:fs'
import type { AddressInfo } from 'node:net'
import { randomBytes } from 'node:crypto'
import { useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, details, newOrg } from './turns.helpers.ts'
import { waitFor } from './fixtures.ts'

const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0
const skip = process.getuid?.() !== 0 ? 'needs root (network namespaces)' : !has('ip') ? 'needs ip' : false

const tag = randomBytes(2).toString('hex')
const siteNs = `wt-web-${tag}`
const siteVeth = `wxw${tag}`
// A test host on a private /30 of its own, outside the sandboxes' pool (10.213.0.0/16).
const third = 1 + (parseInt(tag, 16) % 250)
const hostSide = `10.251.${third}.1`
const siteAddr = `10.251.${third}.2`
const sh = (args: string[]) => spawnSync(args[0]!, args.slice(1), { stdio: 'ignore' })

const SITE = `
const http = require('http'); const [port, loopbackPort] = process.argv.slice(1)
const page = '<!doctype html><html><head><title>Test site</title><script>var secret = "script text"</script><style>p{color:red}</style></head>' +
  '<body><h1>Site title</h1><p>A paragraph with <a href="/about">a link</a>.</p><ul><li>one</li><li>two</li></ul></body></html>'
http.createServer((q, s) => {
  if (q.url === '/') return s.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page)
  if (q.url === '/form') return s.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>Form</title><h1 id=h>Who are you?</h1>' +
    '<label>Name <input id=n></label> <select id=c aria-label=Colour><option>red</option><option>blue</option></select>' +
    '<button onclick="document.getElementById(\\'h\\').textContent = \\'Hello \\' + document.getElementById(\\'n\\').value + \\' in \\' + document.getElementById(\\'c\\').value">Greet</button>')
  if (q.url === '/plain') return s.writeHead(200, { 'content-type': 'text/plain' }).end('just text')
  if (q.url === '/big') return s.writeHead(200, { 'content-type': 'text/html' }).end('<p>' + 'word '.repeat(30000) + '</p>')
  if (q.url === '/to-loopback') return s.writeHead(302, { location: 'http://127.0.0.1:' + loopbackPort + '/' }).end()
  if (q.url === '/to-elsewhere') return s.writeHead(302, { location: 'http://not-allowed.example/' }).end()
  if (q.url === '/to-page') return s.writeHead(301, { location: '/plain' }).end()
  s.writeHead(404).end('no')
}).listen(+port, '0.0.0.0', () => console.log('ready'))`

describe('network tools [sqlite]', { skip }, () => {
  let search: http.Server
  let searchUrl = ''
  const searches: URLSearchParams[] = []
  let loopback: http.Server
  let site: ChildProcess | undefined
  let fake: FakeModelServer

  before(async () => {
    for (const cmd of [`netns add ${siteNs}`, `link add ${siteVeth} type veth peer name eth0 netns ${siteNs}`, `addr add ${hostSide}/30 dev ${siteVeth}`, `link set ${siteVeth} up`, `-n ${siteNs} addr add ${siteAddr}/30 dev eth0`, `-n ${siteNs} link set eth0 up`]) {
      const r = spawnSync('ip', cmd.split(' '), { encoding: 'utf8' })
      if (r.status !== 0) throw new Error(`ip ${cmd}: ${r.stderr}`)
    }
    // A server on the host's loopback, which nothing in a workspace may reach.
    loopback = http.createServer((_q, s) => s.end('host loopback secret'))
    await new Promise<void>((r) => loopback.listen(0, '127.0.0.1', r))
    site = spawn('ip', ['netns', 'exec', siteNs, process.execPath, '-e', SITE, '8080', String((loopback.address() as AddressInfo).port)], { stdio: ['ignore', 'pipe', 'inherit'] })
    await new Promise<void>((resolve, reject) => {
      site!.stdout!.once('data', () => resolve())
      site!.once('exit', (code) => reject(new Error(`site exited ${code}`)))
    })
    search = http.createServer((q, s) => {
      const params = new URL(q.url!, 'http://x').searchParams
      searches.push(params)
      const images = params.get('categories') === 'images'
      const results = images
        ? [{ title: 'A cat', url: 'https://cats.example/page', img_src: 'https://cats.example/cat.jpg', resolution: '640x480', img_format: 'jpeg', thumbnail_src: 'https://cats.example/t.jpg' }]
        : [{ title: 'Warren docs', url: 'https://docs.example/warren', content: 'Runs coding agents   remotely.' }, { title: 'Second', url: 'https://two.example/' }]
      s.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ query: params.get('q'), results }))
    })
    await new Promise<void>((r) => search.listen(0, '127.0.0.1', r))
    searchUrl = `http://127.0.0.1:${(search.address() as AddressInfo).port}`
    fake = await startModelServer({ models: ['m1'] })
  })
  after(async () => {
    site?.kill('SIGKILL')
    sh(['ip', 'link', 'del', siteVeth])
    sh(['ip', 'netns', 'del', siteNs])
    search?.close()
    loopback?.close()
    await fake?.close()
  })

  const w = useWarren('sqlite', {
    env: {
      ...NO_RATE_LIMITS,
      // The deployment's allowlist names the test host, whose private range it lets through.
      WARREN_SANDBOX_ALLOWED_DOMAINS: siteAddr,
      WARREN_SANDBOX_ALLOW_PRIVATE: `${siteAddr}/32`,
    },
    config: { searchUrl: undefined },
  })

  /** One turn whose model calls these tools one step each; returns what the model was sent. */
  async function run(session: Record<string, unknown>, calls: { name: string; args: unknown }[]) {
    w().config.searchUrl = searchUrl
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session(session)
    const before = fake.modelRequests.length
    fake.script(...calls.map((call, i) => ({ toolCalls: [{ id: `call_${i}`, ...call }] })), { text: 'Done.' })
    const turn = await c.accept(sid, 'look it up')
    const settled = await c.settled(sid, turn.id, 60_000)
    assert.equal(settled.status, 'completed', JSON.stringify(settled.error))
    const requests = fake.modelRequests.slice(before)
    const results = calls.map((_, i) => {
      const r = requests[i + 1]!.toolResults.find((t) => t.toolCallId === `call_${i}`)!
      const text = r.content.startsWith('{"error"') ? (JSON.parse(r.content) as { error: string }).error : r.content
      return { text, isError: r.isError === true || r.content.startsWith('{"error"') }
    })
    return { requests, results, items: await c.items(sid) }
  }

  it('web_fetch reads a page as Markdown: headings, links and lists kept, scripts and styles gone', async () => {
    const { results, items, requests } = await run({}, [{ name: 'web_fetch', args: { url: `http://${siteAddr}:8080/` } }, { name: 'web_fetch', args: { url: `http://${siteAddr}:8080/to-page` } }])
    assert.ok(requests[0]!.tools.includes('web_fetch'), 'offered by default')
    const page = results[0]!
    assert.equal(page.isError, false, page.text)
    assert.match(page.text, /^http:\/\/10\.251\.\d+\.2:8080\/ \(200, text\/html\)/)
    assert.match(page.text, /# Site title/)
    assert.match(page.text, /A paragraph with \[a link\]\(\/about\)\./)
    assert.match(page.text, /-\s+one\n-\s+two/)
    assert.ok(!page.text.includes('script text') && !page.text.includes('color:red'), page.text)
    // A redirect within what is allowed is followed, and said.
    assert.match(results[1]!.text, /\/plain \(200, text\/plain\), redirected from .*\/to-page\n\njust text/)
    assert.deepEqual(details(items, 'agent.tool_call').map((d) => d.toolName), ['web_fetch', 'web_fetch'])
  })

  it('cuts a long page and says so', async () => {
    const { results } = await run({}, [{ name: 'web_fetch', args: { url: `http://${siteAddr}:8080/big`, max_chars: 1000 } }])
    assert.equal(results[0]!.isError, false)
    assert.match(results[0]!.text, /\[Cut at 1000 of \d+ characters\. Ask again with a larger max_chars/)
  })

  it('never reaches the host’s loopback, a private address, a domain off the allowlist, nor any of them by a redirect', async () => {
    const lp = (loopback.address() as AddressInfo).port
    const { results } = await run({}, [
      { name: 'web_fetch', args: { url: `http://127.0.0.1:${lp}/` } },
      { name: 'web_fetch', args: { url: `http://localhost:${lp}/` } },
      { name: 'web_fetch', args: { url: 'http://10.252.1.1/' } },
      { name: 'web_fetch', args: { url: 'http://not-allowed.example/' } },
      { name: 'web_fetch', args: { url: `http://${siteAddr}:8080/to-loopback` } },
      { name: 'web_fetch', args: { url: `http://${siteAddr}:8080/to-elsewhere` } },
    ])
    for (const r of results) {
      assert.equal(r.isError, true, r.text)
      assert.ok(!r.text.includes('host loopback secret'), r.text)
      assert.match(r.text, /network policy/)
    }
    assert.match(results[3]!.text, /not-allowed\.example is not on this sandbox's allowlist/)
    assert.match(results[2]!.text, /10\.252\.1\.1/)
    assert.match(results[5]!.text, /not-allowed\.example/)
  })

  it('a permission rule on the domain refuses the call before anything is fetched', async () => {
    const { results, items } = await run({ agent: { permission_rules: [{ domain: '10.251.*.*', decision: 'deny' }] } }, [{ name: 'web_fetch', args: { url: `http://${siteAddr}:8080/` } }])
    assert.match(results[0]!.text, /^Not run: .*permission rule \(domain "10\.251\.\*\.\*"\)/)
    assert.equal(details(items, 'approval.resolved')[0]!.code, 'denied_by_rule')
  })

  it('web_search and image_search ask the SearXNG backend and give titles, addresses, snippets and image sizes', async () => {
    const { results } = await run({}, [{ name: 'web_search', args: { query: 'warren agents', count: 5 } }, { name: 'image_search', args: { query: 'cats' } }])
    assert.match(results[0]!.text, /^Results for "warren agents":\n\n1\. Warren docs\n {3}https:\/\/docs\.example\/warren\n {3}Runs coding agents remotely\.\n2\. Second\n {3}https:\/\/two\.example\//)
    assert.match(results[1]!.text, /1\. A cat\n {3}image: https:\/\/cats\.example\/cat\.jpg \(640x480\) jpeg\n {3}page: https:\/\/cats\.example\/page/)
    const [web, images] = searches.slice(-2)
    assert.equal(web!.get('q'), 'warren agents')
    assert.equal(web!.get('format'), 'json')
    assert.equal(images!.get('categories'), 'images')
  })

  it('browse, then act on references (type, select, click), then a screenshot the model is shown', async () => {
    const refOf = (text: string, pattern: RegExp) => pattern.exec(text)?.[1] ?? 'missing'
    const lastResult = (req: { toolResults: { content: string }[] }) => req.toolResults.at(-1)!.content
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'anthropic')
    const sid = await c.session({ tools: [{ type: 'browse' }, { type: 'browser_act' }, { type: 'screenshot' }] })
    const before = fake.modelRequests.length
    fake.script(
      { toolCalls: [{ id: 'toolu_1', name: 'browse', args: { url: `http://${siteAddr}:8080/form` } }] },
      (req) => ({ toolCalls: [{ id: 'toolu_2', name: 'browser_act', args: { action: 'type', ref: refOf(lastResult(req), /textbox "Name" \[ref=(e\d+)\]/), text: 'Ada' } }] }),
      (req) => ({ toolCalls: [{ id: 'toolu_3', name: 'browser_act', args: { action: 'select', ref: refOf(lastResult(req), /combobox "Colour" \[ref=(e\d+)\]/), value: 'blue' } }] }),
      (req) => ({ toolCalls: [{ id: 'toolu_4', name: 'browser_act', args: { action: 'click', ref: refOf(lastResult(req), /button "Greet" \[ref=(e\d+)\]/) } }] }),
      { toolCalls: [{ id: 'toolu_5', name: 'screenshot', args: {} }] },
      { toolCalls: [{ id: 'toolu_6', name: 'browse', args: { url: `http://127.0.0.1:${(loopback.address() as AddressInfo).port}/` } }] },
      { text: 'Greeted.' },
    )
    const turn = await c.accept(sid, 'fill the form')
    const settled = await c.settled(sid, turn.id, 90_000)
    assert.equal(settled.status, 'completed', JSON.stringify(settled.error))
    const requests = fake.modelRequests.slice(before)
    assert.deepEqual(requests[0]!.tools.filter((t) => ['browse', 'browser_act', 'screenshot', 'web_fetch'].includes(t)).sort(), ['browse', 'browser_act', 'screenshot'])
    const opened = lastResult(requests[1]!)
    assert.match(opened, /^Opened http:\/\/10\.251\.\d+\.2:8080\/form \(200\)\.\nPage: Form — /)
    assert.match(opened, /heading "Who are you\?"/)
    assert.match(opened, /textbox "Name" \[ref=e\d+\]/)
    const clicked = lastResult(requests[4]!)
    assert.match(clicked, /^Did click on e\d+\./)
    assert.match(clicked, /heading "Hello Ada in blue"/)
    // The screenshot reaches the model as an image.
    const shot = JSON.stringify(requests[5]!.body.messages.at(-1))
    assert.match(shot, /"type":"image"/)
    assert.match(shot, /"media_type":"image\/png"/)
    // The browser goes out through the workspace's proxy: the host's loopback is refused.
    const refused = lastResult(requests[6]!)
    assert.match(refused, /network policy refused/)
    assert.ok(!refused.includes('host loopback secret'))
    const items = await c.items(sid)
    assert.deepEqual(details(items, 'agent.tool_call').map((d) => d.toolName), ['browse', 'browser_act', 'browser_act', 'browser_act', 'screenshot', 'browse'])
  })

  it('offers exactly the named network types, none for [], and never one the deployment turned off or cannot run', async () => {
    const offered = async (session: Record<string, unknown>) => (await run(session, [])).requests[0]!.tools.filter((t) => ['web_fetch', 'web_search', 'image_search', 'browse', 'browser_act', 'screenshot'].includes(t))
    assert.deepEqual(await offered({ tools: [{ type: 'web_fetch' }] }), ['web_fetch'])
    assert.deepEqual(await offered({ tools: [] }), [])
    // Naming only functions (or MCP servers) narrows nothing: the network tools stay as they are by default.
    assert.deepEqual((await offered({ tools: [{ type: 'function', name: 'f' }] })).sort(), ['browse', 'browser_act', 'image_search', 'screenshot', 'web_fetch', 'web_search'])
    assert.deepEqual((await offered({})).sort(), ['browse', 'browser_act', 'image_search', 'screenshot', 'web_fetch', 'web_search'])
    w().config.disabledTools = ['web_search']
    try {
      assert.deepEqual(await offered({ tools: [{ type: 'web_search' }, { type: 'web_fetch' }] }), ['web_fetch'])
    } finally {
      w().config.disabledTools = []
    }
    w().config.searchUrl = undefined
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session({ tools: [{ type: 'image_search' }] })
    fake.script({ text: 'no search here' })
    const before = fake.modelRequests.length
    const turn = await c.accept(sid, 'x')
    await c.settled(sid, turn.id)
    assert.ok(!fake.modelRequests[before]!.tools.includes('image_search'), 'without a search backend it is not offered')
  })
})

describe('the session browser’s lifetime [sqlite]', { skip }, () => {
  const w = useWarren('sqlite', { env: { ...NO_RATE_LIMITS, WARREN_IDLE_PAUSE_MS: '1500' } })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake?.close())

  const chromiumOf = (uid: number) => spawnSync('pgrep', ['-u', String(uid), '-f', 'remote-debugging-pipe'], { encoding: 'utf8' }).stdout.trim()

  it('starts on first use as the sandbox’s user, closes before the workspace pauses, and is gone with the session', async () => {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session()
    // The page is refused (the host's loopback), but opening it starts the browser.
    fake.script({ toolCalls: [{ id: 'call_id', name: 'bash', args: { command: 'id -u' } }] }, { toolCalls: [{ id: 'call_b', name: 'browse', args: { url: 'http://127.0.0.1:9/' } }] }, { text: 'ok' })
    const before = fake.modelRequests.length
    const turn = await c.accept(sid, 'open it')
    assert.equal((await c.settled(sid, turn.id, 60_000)).status, 'completed')
    const uid = Number(/\d+/.exec(fake.modelRequests[before + 1]!.toolResults.at(-1)!.content)![0])
    assert.ok(uid > 0)
    assert.notEqual(chromiumOf(uid), '', 'Chromium runs, as the sandbox’s user')
    // It and every process it started run under the workspace's no_new_privs and syscall filter.
    const statuses = spawnSync('pgrep', ['-u', String(uid), '-f', 'chromium'], { encoding: 'utf8' }).stdout.trim().split('\n').flatMap((pid) => {
      try {
        return [fs.readFileSync(`/proc/${pid}/status`, 'utf8')]
      } catch {
        return [] // exited meanwhile
      }
    })
    assert.ok(statuses.length > 1, 'control: Chromium runs several processes')
    for (const status of statuses) assert.match(status, /^NoNewPrivs:\s*1$[\s\S]*^Seccomp:\s*2$/m, status.split('\n')[0])
    // The service talks to it over pipes: it listens on no port of the workspace, nothing to publish.
    const found = await c.call('POST', `/v1/sessions/${sid}/preview`, {})
    assert.equal(found.statusCode, 409, 'nothing listens, the browser neither')
    await waitFor('the workspace pauses when idle', async () => (await c.getSession(sid)).environment.state === 'paused', 30_000)
    assert.equal(chromiumOf(uid), '', 'closed before the pause')
    // Used again, it starts again; deleting the session takes it away.
    fake.script({ toolCalls: [{ id: 'call_b2', name: 'browse', args: { url: 'http://127.0.0.1:9/' } }] }, { text: 'ok' })
    const again = await c.accept(sid, 'again')
    assert.equal((await c.settled(sid, again.id, 60_000)).status, 'completed')
    assert.notEqual(chromiumOf(uid), '')
    assert.equal((await c.call('DELETE', `/v1/sessions/${sid}`)).statusCode, 200)
    await waitFor('the browser is gone with the session', async () => chromiumOf(uid) === '', 20_000)
  })
})
