import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import net from 'node:net'
import { PG_URL, forEachDialect, startWarren, type Warren } from './harness.ts'
import { expectError, sleep } from './expect.ts'

/**
 * A TCP proxy between the service and PostgreSQL that the test can cut (refuse connections),
 * black-hole (accept and never answer) and restore, killing every open socket on a cut.
 */
function pgProxy(target: URL) {
  const sockets = new Set<net.Socket>()
  let mode: 'forward' | 'hang' = 'forward'
  let server: net.Server | undefined
  let port = 0
  const track = (s: net.Socket) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
    s.on('error', () => s.destroy())
  }
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server = net.createServer((client) => {
        track(client)
        if (mode === 'hang') return
        const upstream = net.connect(Number(target.port || 5432), target.hostname)
        track(upstream)
        upstream.on('close', () => client.destroy())
        client.on('close', () => upstream.destroy())
        client.pipe(upstream).pipe(client)
      })
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => {
        port = (server!.address() as net.AddressInfo).port
        resolve()
      })
    })
  const killSockets = () => {
    for (const s of sockets) s.destroy()
  }
  return {
    start: listen,
    url: () => {
      const u = new URL(PG_URL)
      u.hostname = '127.0.0.1'
      u.port = String(port)
      return u.toString()
    },
    /** Stops listening and kills every connection: the store cannot be reached at all. */
    cut: async () => {
      const closed = new Promise<void>((r) => server!.close(() => r()))
      killSockets()
      await closed
    },
    /** Kills every connection but keeps accepting new ones without ever answering. */
    blackHole: () => {
      mode = 'hang'
      killSockets()
    },
    restore: async () => {
      mode = 'forward'
      killSockets()
      if (!server?.listening) await listen()
    },
    stop: async () => {
      killSockets()
      if (server?.listening) await new Promise<void>((r) => server!.close(() => r()))
    },
  }
}

const retryAfter = (res: { headers: Record<string, unknown> }) => {
  const v = String(res.headers['retry-after'])
  assert.match(v, /^\d+$/, `Retry-After ${v}`)
  assert.ok(Number(v) >= 1)
}

forEachDialect('token directory unavailable', (dialect) => {
  if (dialect !== 'postgres') {
    it('needs a store reached over the network', (t) => {
      t.skip('SQLite is a file inside the service process: there is no directory to lose; covered on PostgreSQL')
    })
    return
  }

  const proxy = pgProxy(new URL(PG_URL))
  let w: Warren
  before(async () => {
    await proxy.start()
    w = await startWarren('postgres', { env: { DATABASE_URL: proxy.url() } })
  })
  after(async () => {
    await proxy.restore()
    await w?.close()
    await proxy.stop()
  })

  it('answers normally through the proxy', async () => {
    assert.equal((await w.inject({ method: 'GET', url: '/v1/health' })).statusCode, 200)
  })

  it('answers 503 directory_unavailable with Retry-After, never 401, when the store is cut off', async () => {
    const unknown = 'svc_pat_this_token_was_never_issued_000000'
    await proxy.cut()
    try {
      for (const token of [w.token, unknown]) {
        const res = await w.inject({ method: 'GET', url: '/v1/health', token })
        expectError(res, 503, 'directory_unavailable')
        retryAfter(res)
      }
      const mint = await w.inject({ method: 'POST', url: '/v1/tokens', payload: { scopes: ['sessions:read'], expires_in_days: 7 } })
      expectError(mint, 503, 'directory_unavailable')
      retryAfter(mint)
      // What needs no lookup still answers: a request with no token at all, and the description.
      expectError(await w.inject({ method: 'GET', url: '/v1/health', token: null }), 401, 'authentication_error')
      assert.equal((await w.inject({ method: 'GET', url: '/v1/openapi.json', token: null })).statusCode, 200)
    } finally {
      await proxy.restore()
    }
    const back = await w.inject({ method: 'GET', url: '/v1/health' })
    assert.equal(back.statusCode, 200, back.body)
    // And an unknown token is a 401 again, now that the directory can say so.
    expectError(await w.inject({ method: 'GET', url: '/v1/health', token: unknown }), 401, 'authentication_error')
  })

  it('answers 503 when the store accepts connections but never answers', async () => {
    proxy.blackHole()
    await sleep(200) // let the pool see its old connections die, so the request must open a new one
    try {
      const res = await w.inject({ method: 'GET', url: '/v1/health' })
      expectError(res, 503, 'directory_unavailable')
      retryAfter(res)
    } finally {
      await proxy.restore()
    }
    assert.equal((await w.inject({ method: 'GET', url: '/v1/health' })).statusCode, 200)
  })
})
