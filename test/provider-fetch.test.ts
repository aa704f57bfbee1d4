import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import { providerFetch as guardedProviderFetch } from '../src/runner/provider-fetch.ts'

// The server below listens on 127.0.0.1, which the outbound policy opens only when listed.
const providerFetch = guardedProviderFetch(['127.0.0.1/32'])

// The model providers' clients send through providerFetch: it must answer as fetch does, or the
// SDK would misread a stream, a failure or an abort.
describe('providerFetch', () => {
  let base = ''
  const seen: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders; body: string }> = []
  let release: () => void = () => {}
  const server = http.createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8').on('data', (d: string) => (body += d))
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body })
      if (req.url === '/stream') {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'x-twice': ['a', 'b'] })
        res.write('data: first\n\n')
        // The second part only once the client read the first: a buffered body would hang here.
        release = () => res.end('data: second\n\n')
        return
      }
      if (req.url === '/moved') {
        res.writeHead(307, { location: '/landed' })
        return res.end()
      }
      if (req.url === '/nothing') {
        res.writeHead(204)
        return res.end()
      }
      if (req.url === '/refused') {
        res.writeHead(401, { 'content-type': 'application/json' })
        return res.end('{"error":{"message":"bad key"}}')
      }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ at: req.url }))
    })
  })
  before(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  after(() => server.close())

  it('posts the body and headers, and streams the answer as it comes', async () => {
    const res = await providerFetch(`${base}/stream`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer k' }, body: '{"m":1}' })
    assert.equal(res.status, 200)
    assert.equal(res.ok, true)
    assert.equal(res.headers.get('content-type'), 'text/event-stream')
    assert.equal(res.headers.get('x-twice'), 'a, b')
    const last = seen.at(-1)!
    assert.deepEqual([last.method, last.body, last.headers.authorization], ['POST', '{"m":1}', 'Bearer k'])
    const reader = res.body!.getReader()
    const first = await reader.read()
    assert.equal(new TextDecoder().decode(first.value), 'data: first\n\n')
    release()
    let rest = ''
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value)
    assert.equal(rest, 'data: second\n\n')
  })

  it('gives an error answer its status and body, as fetch does', async () => {
    const res = await providerFetch(`${base}/refused`, { method: 'POST', body: '{}' })
    assert.equal(res.status, 401)
    assert.equal(res.ok, false)
    assert.deepEqual(await res.json(), { error: { message: 'bad key' } })
  })

  it('does not follow a redirect: the 3xx is the answer, so no server sends it on elsewhere', async () => {
    const before = seen.length
    const res = await providerFetch(`${base}/moved`, { method: 'POST', body: '{"again":true}' })
    assert.equal(res.status, 307)
    assert.equal(res.headers.get('location'), '/landed')
    assert.deepEqual(seen.slice(before).map((s) => s.url), ['/moved'])
  })

  it('refuses an address the policy does not open before connecting: another loopback address, the metadata address, a private one', async () => {
    // A second listener on 127.0.0.2: one connection attempt would show.
    let connections = 0
    const other = net.createServer((s) => {
      connections++
      s.destroy()
    })
    await new Promise<void>((r) => other.listen(0, '127.0.0.2', r))
    const port = (other.address() as AddressInfo).port
    try {
      const urls = [`http://127.0.0.2:${port}/v1/chat/completions`, `http://[::ffff:127.0.0.2]:${port}/x`, 'http://169.254.169.254/latest', 'http://10.0.5.7:9/v1', 'http://[fd00:ec2::254]/x']
      for (const url of urls) {
        for (const body of ['{}', new Uint8Array([123, 125])]) {
          const err = await providerFetch(url, { method: 'POST', body }).catch((e: unknown) => e)
          assert.ok(err instanceof TypeError, url)
          assert.equal((err.cause as NodeJS.ErrnoException).code, 'EWARRENREFUSED', url)
          assert.match((err.cause as Error).message, /WARREN_MODEL_ALLOW_PRIVATE/, url)
        }
      }
      const named = await guardedProviderFetch(['10.0.5.0/24'])(`http://localhost:${port}/x`, { method: 'POST', body: '{}' }).catch((e: unknown) => e)
      assert.equal(((named as Error).cause as NodeJS.ErrnoException).code, 'EWARRENREFUSED', 'a loopback name without loopback listed')
      assert.equal(connections, 0, 'nothing reached the listener')
      // Listed, it is reached.
      const opened = await guardedProviderFetch(['127.0.0.2/32'])(`http://127.0.0.2:${port}/x`, { method: 'POST', body: '{}' }).catch((e: unknown) => e)
      assert.notEqual(((opened as Error).cause as NodeJS.ErrnoException | undefined)?.code, 'EWARRENREFUSED')
      assert.equal(connections, 1)
    } finally {
      await new Promise((r) => other.close(r))
    }
  })

  it('answers a 204 with no body', async () => {
    const res = await providerFetch(`${base}/nothing`, { method: 'POST', body: '{}' })
    assert.equal(res.status, 204)
    assert.equal(res.body, null)
  })

  it('rejects a connection that fails as fetch does: TypeError "fetch failed", the reason in its cause', async () => {
    const closed = net.createServer()
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r))
    const port = (closed.address() as AddressInfo).port
    await new Promise((r) => closed.close(r))
    const err = await providerFetch(`http://127.0.0.1:${port}/x`, { method: 'POST', body: '{}' }).catch((e: unknown) => e)
    assert.ok(err instanceof TypeError)
    assert.equal(err.message, 'fetch failed')
    assert.equal((err.cause as NodeJS.ErrnoException).code, 'ECONNREFUSED')
  })

  it('rejects with the signal’s reason when aborted, before the answer or while reading it', async () => {
    const early = new AbortController()
    const reason = new Error('stop now')
    early.abort(reason)
    await assert.rejects(providerFetch(`${base}/plain`, { method: 'POST', body: '{}', signal: early.signal }), (e) => e === reason)
    const late = new AbortController()
    const res = await providerFetch(`${base}/stream`, { method: 'POST', body: '{}', signal: late.signal })
    const reader = res.body!.getReader()
    await reader.read()
    late.abort(new Error('stop reading'))
    await assert.rejects(reader.read())
    release()
  })
})
