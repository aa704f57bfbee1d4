// Previews through HTTP: a site the agent's own bash starts in the workspace (listening on the
// sandbox's loopback) is published, served under its subdomain on the service's own address
// (HTTP, streamed responses, WebSocket), behind a token at the session's `preview.url`, woken from
// a pause, and taken down at once.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { errorOf, forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, details, newOrg } from './turns.helpers.ts'
import { agentRuns, hostRequest, openWebSocket, startSiteCommand } from './previews.helpers.ts'
import { waitFor } from './fixtures.ts'

forEachDialect('previews', (dialect) => {
  // A short idle pause: the test of a paused workspace waits for it, the others are unaffected
  // (every request wakes the workspace, and an open request or WebSocket holds it awake). Names
  // are not held after withdrawal here, so that a name can go to another organization at once
  // (previews.names.test.ts holds them).
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_IDLE_PAUSE_MS: '1500', WARREN_PREVIEW_NAME_HOLD_MS: '0' } })
  let fake: FakeModelServer
  let base: string
  let org: Awaited<ReturnType<typeof newOrg>>
  let c: ReturnType<typeof client>
  let sid: string
  const hostOf = (sub: string) => `${sub}.${w().config.previewDomain}`

  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    base = await w().listen()
    org = await newOrg(w())
    c = client(w(), org)
    await c.connect(fake, 'openai')
    sid = await c.session()
    // Two servers: the site on the sandbox's loopback only (a development server's default), and a
    // second one on every address at a higher port.
    const turn = await agentRuns(c, fake, sid, startSiteCommand(3000, '127.0.0.1', 'site'), startSiteCommand(4100, '0.0.0.0', 'other'))
    assert.equal(turn.status, 'completed')
  })
  after(() => fake.close())

  it('publishes the lowest served port under the derived subdomain, with preview.ready and the session fields', async () => {
    const res = await c.call('POST', `/v1/sessions/${sid}/preview`, {})
    assert.equal(res.statusCode, 200, res.body)
    const preview = res.json()
    const sub = sid.replace(/_/g, '-')
    const published = `http://${sub}.${w().config.previewDomain}/`
    assert.deepEqual(preview, { object: 'preview', subdomain: sub, url: published, published_url: published, port: 3000 })
    assert.match(w().config.previewDomain, /^preview\.localhost:\d+$/)
    assert.notEqual(w().config.previewDomain, 'preview.localhost:0')

    const session = await c.getSession(sid)
    assert.deepEqual(session.preview, { url: `${base}/v1/sessions/${sid}/preview/proxy/`, published_url: published, port: 3000 })
    assert.deepEqual(details(await c.items(sid), 'preview.ready').map(({ event: _e, ...d }) => d), [{ port: 3000, url: published }])

    const page = await hostRequest(base, hostOf(sub), '/')
    assert.equal(page.status, 200)
    assert.match(page.body, /<h1 id="title">Hello from site<\/h1>/)
    // The Host is matched case-insensitively and whatever the port.
    assert.equal((await hostRequest(base, hostOf(sub).toUpperCase().replace(/:\d+$/, ':1'), '/')).status, 200)
  })

  it('passes method, path, query and body through; adds forwarding headers; keeps cookies on their host', async () => {
    const sub = sid.replace(/_/g, '-')
    const echo = await hostRequest(base, hostOf(sub), '/echo/a?x=1&y=%20z', { method: 'PUT', body: 'hello body', headers: { 'content-type': 'text/plain', 'x-custom': 'kept' } })
    assert.equal(echo.status, 200)
    const got = JSON.parse(echo.body)
    assert.equal(got.method, 'PUT')
    assert.equal(got.url, '/echo/a?x=1&y=%20z')
    assert.equal(got.body, 'hello body')
    assert.equal(got.headers['x-custom'], 'kept')
    assert.equal(got.headers.host, hostOf(sub))
    assert.equal(got.headers['x-forwarded-host'], hostOf(sub))
    assert.equal(got.headers['x-forwarded-proto'], 'http')
    assert.equal(got.headers['x-forwarded-for'], '127.0.0.1')
    const page = await hostRequest(base, hostOf(sub), '/')
    assert.deepEqual(page.headers['set-cookie'], ['seen=1; Path=/', 'plain=2; Path=/'])
    // A large body goes through whole.
    const big = await hostRequest(base, hostOf(sub), '/big?bytes=3000000')
    assert.equal(big.body.length, 3_000_000)
  })

  it('keeps every cookie the site sets on its own host, however its Domain attribute is spelt', async () => {
    const answer = await hostRequest(base, hostOf(sid.replace(/_/g, '-')), '/cookies')
    assert.equal(answer.status, 200)
    assert.deepEqual(answer.headers['set-cookie'], ['a=1; Path=/', 'b=2', 'c=3; Path=/; HttpOnly', 'd=4; Max-Age=60', 'e=5'])
  })

  it("never passes the caller's Authorization on to the workspace; its own host's cookies go back to it", async () => {
    const sub = sid.replace(/_/g, '-')
    const echo = await hostRequest(base, hostOf(sub), '/echo', { headers: { authorization: `Bearer ${org.token}`, cookie: 'seen=1; plain=2' } })
    const got = JSON.parse(echo.body)
    assert.equal(got.headers.authorization, undefined)
    assert.equal(JSON.stringify(got).includes(org.token), false)
    // A browser sends a host only the cookies scoped to it: the ones this site set itself.
    assert.equal(got.headers.cookie, 'seen=1; plain=2')
    // A WebSocket upgrade carries no Authorization either.
    const ws = await openWebSocket(base, hostOf(sub), '/ws', { authorization: `Bearer ${org.token}` })
    assert.equal(ws.status, 101, ws.head)
    assert.match(ws.head, /x-authorization-seen: none/i)
    // Its handshake's cookie stays on the host too.
    assert.match(ws.head, /set-cookie: ws=1; Path=\/\r?$/im)
    assert.doesNotMatch(ws.head, /domain/i)
    ws.close()
    // A handshake answer with a control byte in its head (a NUL a parser may read as a line end) is cut, not passed on.
    const nul = await openWebSocket(base, hostOf(sub), '/ws-nul')
    assert.equal(nul.status, 0, nul.head)
    await nul.closed
  })

  it('passes a chunked upload on whole, also one that waited for 100 Continue', async () => {
    const u = new URL(base)
    const upload = (headers: Record<string, string>) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = http.request({ host: u.hostname, port: u.port, method: 'POST', path: '/upload', headers: { host: hostOf(sid.replace(/_/g, '-')), ...headers } }, (res) => {
          let body = ''
          res.setEncoding('utf8').on('data', (d: string) => (body += d))
          res.on('end', () => resolve({ status: res.statusCode!, body }))
        })
        req.on('error', reject)
        const send = () => {
          req.write('first chunk, ')
          setImmediate(() => req.end('second chunk'))
        }
        if (headers.expect) req.once('continue', send)
        else send()
      })
    for (const headers of [{}, { expect: '100-continue' }] as Record<string, string>[]) {
      const answer = await upload(headers)
      assert.equal(answer.status, 200, answer.body)
      const got = JSON.parse(answer.body)
      assert.equal(got.body, 'first chunk, second chunk')
      assert.equal(got.headers.expect, undefined)
    }
  })

  it('streams a response as the workspace writes it', async () => {
    const sub = sid.replace(/_/g, '-')
    const u = new URL(base)
    const chunks: string[] = []
    let ended = false
    const first = new Promise<void>((resolve, reject) => {
      http
        .get({ host: u.hostname, port: u.port, path: '/stream', headers: { host: hostOf(sub) } }, (res) => {
          res.setEncoding('utf8')
          res.on('data', (d: string) => {
            chunks.push(d)
            resolve()
          })
          res.on('end', () => (ended = true))
        })
        .on('error', reject)
    })
    // The site sends its second part only once asked: a proxy that buffered would never show the first.
    await first
    assert.deepEqual(chunks, ['first part\n'])
    assert.equal(ended, false)
    assert.equal((await hostRequest(base, hostOf(sub), '/release')).body, 'released')
    await waitFor('the stream ends', async () => ended)
    assert.equal(chunks.join(''), 'first part\nsecond part\n')
  })

  it('carries WebSocket upgrades both ways', async () => {
    const sub = sid.replace(/_/g, '-')
    const ws = await openWebSocket(base, hostOf(sub), '/ws')
    assert.equal(ws.status, 101, ws.head)
    ws.send('hello')
    assert.equal(await ws.next(), 'echo: hello')
    ws.send('again')
    assert.equal(await ws.next(), 'echo: again')
    ws.close()
    // An upgrade for an unknown subdomain or for the API's own host is refused, not hung.
    const unknown = await openWebSocket(base, hostOf('no-such-preview'), '/ws')
    assert.equal(unknown.status, 404)
    const api = await openWebSocket(base, new URL(base).host, '/v1/health')
    assert.equal(api.status, 404)
  })

  it('serves the same site behind a token at preview.url, never passing the token on', async () => {
    const session = await c.getSession(sid)
    const tokenUrl = new URL(session.preview.url)
    const get = (token: string | null, path = '', init: RequestInit = {}) =>
      fetch(`${tokenUrl.href}${path}`, { ...init, headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(init.headers as Record<string, string>) } })
    const page = await get(org.token)
    assert.equal(page.status, 200)
    assert.match(await page.text(), /Hello from site/)
    // The API's origin is every session's: a cookie set there would reach every other session's site.
    assert.deepEqual(page.headers.getSetCookie(), [])
    assert.equal((await get(null)).status, 401)
    const stranger = await newOrg(w())
    const hidden = await get(stranger.token)
    assert.equal(hidden.status, 404)
    assert.match((await hidden.json()).error.message, new RegExp(sid))

    const echo = await get(org.token, 'deep/path?q=1', { method: 'POST', body: '{"a":1}', headers: { 'content-type': 'application/json', cookie: 'from=api-origin' } })
    assert.equal(echo.status, 200)
    const got = await echo.json()
    assert.equal(got.url, '/deep/path?q=1')
    assert.equal(got.body, '{"a":1}')
    assert.equal(got.headers.authorization, undefined)
    assert.equal(got.headers.cookie, undefined)
    assert.equal(JSON.stringify(got).includes(org.token), false)

    // Reading through it needs sessions:read; writing, sessions:write.
    const minted = await c.call('POST', '/v1/tokens', { scopes: ['sessions:read'], expires_in_days: 7 })
    assert.equal(minted.statusCode, 201, minted.body)
    const reader = minted.json().token as string
    assert.equal((await get(reader, 'x')).status, 200)
    const refused = await get(reader, 'x', { method: 'POST', body: 'no' })
    assert.equal(refused.status, 403)
    assert.match((await refused.json()).error.message, /sessions:write/)
  })

  it('refuses bad subdomains, a port out of range, and a subdomain another session holds', async () => {
    for (const subdomain of ['A1', 'x', 'a'.repeat(64), 'under_score', 'dot.ted', '']) {
      const res = await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain })
      assert.equal(res.statusCode, 400, subdomain)
      assert.match(errorOf(res).message, /subdomain/)
    }
    for (const port of [0, 65536, 3.5]) {
      const res = await c.call('POST', `/v1/sessions/${sid}/preview`, { port })
      assert.equal(res.statusCode, 400, String(port))
      assert.match(errorOf(res).message, /port/)
    }
    assert.match(errorOf(await c.call('POST', `/v1/sessions/${sid}/preview`, { bogus: 1 })).message, /Unknown field "bogus"/)

    // Another session (another organization, even) cannot take a name in use.
    const other = await newOrg(w())
    const oc = client(w(), other)
    await oc.connect(fake, 'openai')
    const otherSid = await oc.session()
    const mine = sid.replace(/_/g, '-')
    const taken = await oc.call('POST', `/v1/sessions/${otherSid}/preview`, { subdomain: mine, port: 8000 })
    assert.equal(taken.statusCode, 409)
    assert.match(errorOf(taken).message, new RegExp(`"${mine}" is taken`))
    assert.equal((await oc.getSession(otherSid)).preview.published_url, null, 'nothing half done')
    // And a session of another organization is not found at all.
    assert.equal((await oc.call('POST', `/v1/sessions/${sid}/preview`, { port: 8000 })).statusCode, 404)
    assert.equal((await oc.call('DELETE', `/v1/sessions/${sid}/preview`)).statusCode, 404)
  })

  it('moves to a new subdomain and port: the old name stops answering', async () => {
    const moved = await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain: 'my-site-2', port: 4100 })
    assert.equal(moved.statusCode, 200, moved.body)
    assert.equal(moved.json().url, `http://my-site-2.${w().config.previewDomain}/`)
    const page = await hostRequest(base, hostOf('my-site-2'), '/')
    assert.match(page.body, /Hello from other/)
    const old = await hostRequest(base, hostOf(sid.replace(/_/g, '-')), '/')
    assert.equal(old.status, 404)
    assert.match(old.headers['content-type'] ?? '', /^text\/html/)
    assert.match(old.body, /No preview is published at this address/)
    assert.equal((await c.getSession(sid)).preview.port, 4100)
    assert.equal(details(await c.items(sid), 'preview.ready').length, 2)
  })

  it('routes every request by its own Host, also on one kept-alive connection (as a reverse proxy in front would send them)', async () => {
    const second = await c.session()
    assert.equal((await c.call('POST', `/v1/sessions/${second}/preview`, { subdomain: 'second-one', port: 3000 })).statusCode, 200)
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    const api = new URL(base).host
    for (let round = 0; round < 2; round++) {
      assert.match((await hostRequest(base, hostOf('my-site-2'), '/', { agent })).body, /Hello from other/)
      const b = await hostRequest(base, hostOf('second-one'), '/', { agent })
      // The second session's workspace (no server in it) answers with the service's own page.
      assert.equal(b.status, 502)
      assert.match(b.body, /Warren preview · 502/)
      const health = await hostRequest(base, api, '/v1/openapi.json', { agent })
      assert.equal(health.status, 200)
      assert.equal(health.headers['content-type']?.startsWith('application/json'), true)
    }
    agent.destroy()
    assert.equal((await c.call('DELETE', `/v1/sessions/${second}`)).statusCode, 200)
  })

  it('a port with nothing listening gets a clear 502 page; asking for no port where nothing listens is a 409', async () => {
    const res = await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain: 'quiet-port', port: 5999 })
    assert.equal(res.statusCode, 200, res.body)
    const page = await hostRequest(base, hostOf('quiet-port'), '/anything')
    assert.equal(page.status, 502)
    assert.match(page.headers['content-type'] ?? '', /^text\/html/)
    assert.match(page.body, /Nothing in the workspace is listening on port 5999/)

    const empty = await c.session()
    const none = await c.call('POST', `/v1/sessions/${empty}/preview`, {})
    assert.equal(none.statusCode, 409)
    assert.match(errorOf(none).message, /Nothing in the workspace is listening/)
    assert.equal((await c.getSession(empty)).preview.url, null)
  })

  it('a paused workspace resumes on a request, and its running time from then on is counted (as the README says)', async () => {
    const res = await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain: 'wake-up', port: 3000 })
    assert.equal(res.statusCode, 200, res.body)
    await waitFor('the workspace pauses when idle', async () => (await c.getSession(sid)).environment.state === 'paused', 20_000)
    const usage = async () => (await c.call('GET', `/v1/sessions/${sid}/usage`)).json() as { intervals: number }
    const before = await usage()
    // A visitor with no token at all.
    const page = await hostRequest(base, hostOf('wake-up'), '/')
    assert.equal(page.status, 200)
    assert.match(page.body, /Hello from site/)
    assert.equal((await c.getSession(sid)).environment.state, 'running')
    const moves = (await c.items(sid)).map((i) => i.detail.event).filter((e) => e === 'sandbox.paused' || e === 'sandbox.resumed')
    assert.deepEqual(moves.slice(-2), ['sandbox.paused', 'sandbox.resumed'])
    assert.equal((await usage()).intervals, before.intervals + 1, 'the visit opened a running interval')
  })

  it('DELETE takes it down at once: open connections are cut, the name is free, a second DELETE is a 404', async () => {
    const res = await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain: 'going-away', port: 3000 })
    assert.equal(res.statusCode, 200, res.body)
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    assert.equal((await hostRequest(base, hostOf('going-away'), '/', { agent })).status, 200)
    const ws = await openWebSocket(base, hostOf('going-away'), '/ws')
    assert.equal(ws.status, 101)

    const del = await c.call('DELETE', `/v1/sessions/${sid}/preview`)
    assert.equal(del.statusCode, 200, del.body)
    assert.deepEqual(del.json(), { object: 'preview.deleted', id: sid, deleted: true })
    await ws.closed
    // The kept-alive connection was cut too; a new request finds nothing.
    const after = await hostRequest(base, hostOf('going-away'), '/', { agent })
    assert.equal(after.status, 404)
    agent.destroy()
    assert.deepEqual((await c.getSession(sid)).preview, { url: null, published_url: null, port: null })
    const again = await c.call('DELETE', `/v1/sessions/${sid}/preview`)
    assert.equal(again.statusCode, 404, again.body)
    assert.match(errorOf(again).message, /has no preview/)
    // The token address answers 404 in the error shape.
    const viaToken = await fetch(`${base}/v1/sessions/${sid}/preview/proxy/`, { headers: { authorization: `Bearer ${org.token}` } })
    assert.equal(viaToken.status, 404)

    // The name is free for another session now.
    const next = await c.session()
    assert.equal((await c.call('POST', `/v1/sessions/${next}/preview`, { subdomain: 'going-away', port: 3000 })).statusCode, 200)
  })

  it('deleting the session takes its preview down and frees its name', async () => {
    const doomed = await c.session()
    assert.equal((await c.call('POST', `/v1/sessions/${doomed}/preview`, { subdomain: 'doomed-site', port: 3000 })).statusCode, 200)
    assert.equal((await c.call('DELETE', `/v1/sessions/${doomed}`)).statusCode, 200)
    assert.equal((await hostRequest(base, hostOf('doomed-site'), '/')).status, 404)
    assert.equal((await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain: 'doomed-site', port: 3000 })).statusCode, 200)
  })

  // The gateway keeps a subdomain's route in memory while the store is quiet: whatever it kept
  // must go with the preview, and a name taken over by another organization's session must lead
  // only there, also on a connection kept alive across the change.
  it('a route served from memory never outlives an unpublish or a deletion, nor leads to another organization\'s workspace', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    const get = (sub: string) => hostRequest(base, hostOf(sub), '/small-echo', { agent })
    assert.equal((await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain: 'kept-route', port: 3000 })).statusCode, 200)
    for (let i = 0; i < 3; i++) assert.equal(JSON.parse((await get('kept-route')).body).name, 'site')
    assert.equal((await c.call('DELETE', `/v1/sessions/${sid}/preview`)).statusCode, 200)
    assert.equal((await get('kept-route')).status, 404)

    // A session deleted: its (here unserved, so 502) route goes with it.
    const doomed = await c.session()
    assert.equal((await c.call('POST', `/v1/sessions/${doomed}/preview`, { subdomain: 'kept-route', port: 3000 })).statusCode, 200)
    for (let i = 0; i < 2; i++) assert.equal((await get('kept-route')).status, 502)
    assert.equal((await c.call('DELETE', `/v1/sessions/${doomed}`)).statusCode, 200)
    assert.equal((await get('kept-route')).status, 404)

    // The name goes to another organization's session (its own site): only that site answers.
    const other = client(w(), await newOrg(w()))
    await other.connect(fake, 'openai')
    const theirs = await other.session()
    assert.equal((await agentRuns(other, fake, theirs, startSiteCommand(3000, '127.0.0.1', 'theirs'))).status, 'completed')
    assert.equal((await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain: 'kept-route', port: 3000 })).statusCode, 200)
    for (let i = 0; i < 3; i++) assert.equal(JSON.parse((await get('kept-route')).body).name, 'site')
    assert.equal((await c.call('DELETE', `/v1/sessions/${sid}/preview`)).statusCode, 200)
    assert.equal((await other.call('POST', `/v1/sessions/${theirs}/preview`, { subdomain: 'kept-route', port: 3000 })).statusCode, 200)
    for (let i = 0; i < 3; i++) assert.equal(JSON.parse((await get('kept-route')).body).name, 'theirs')
    // And back: the first organization's site again, never the other's.
    assert.equal((await other.call('DELETE', `/v1/sessions/${theirs}/preview`)).statusCode, 200)
    assert.equal((await c.call('POST', `/v1/sessions/${sid}/preview`, { subdomain: 'kept-route', port: 3000 })).statusCode, 200)
    for (let i = 0; i < 3; i++) assert.equal(JSON.parse((await get('kept-route')).body).name, 'site')
    agent.destroy()
  })
})
