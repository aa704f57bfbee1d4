// A provider may say a preview is served at a URL of its own (a Kubernetes Service, a remote
// provider's https address) rather than at an address the service dials: the gateway sends the
// page and the WebSocket upgrade there, with that URL's Host, the caller's in x-forwarded-host.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { startWarren, type Warren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { client, newOrg, NO_RATE_LIMITS } from './turns.helpers.ts'
import { hostRequest, openWebSocket } from './previews.helpers.ts'
import { waitFor } from './fixtures.ts'
import { localKind } from '../src/sandbox/local/local-kind.ts'
import type { ProviderKind } from '../src/sandbox/providers.ts'
import type { Sandbox, SandboxProvider } from '../src/sandbox/sandbox.ts'
import { randomText } from '../src/shared/ids.ts'

/** Every function of `target` bound to it, with `swap`'s members in place of its own. */
function overlay<T extends object>(target: T, swap: Partial<Record<PropertyKey, unknown>>): T {
  return new Proxy(target, {
    get(t, key) {
      if (Object.hasOwn(swap, key)) return swap[key]
      const v = Reflect.get(t, key, t)
      return typeof v === 'function' ? v.bind(t) : v
    },
  })
}

let site: http.Server
let siteOrigin = ''
/** Asked of the site: the ports the gateway asked the provider about. */
const asked: number[] = []
let w: Warren
let fake: FakeModelServer
let base = ''

before(async () => {
  // Stands for the provider's own address of a workspace port: answers with what reached it.
  site = http.createServer((req, res) => {
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ host: req.headers.host, forwardedHost: req.headers['x-forwarded-host'], path: req.url }))
  })
  site.on('upgrade', (req, socket) => {
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64')
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`)
    const text = Buffer.from(`upgraded with host ${req.headers.host}`)
    socket.write(Buffer.concat([Buffer.from([0x81, text.length]), text]))
  })
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve))
  siteOrigin = `http://127.0.0.1:${(site.address() as AddressInfo).port}`
  // The local provider underneath runs the workspace; only its preview targets are URLs.
  const viaUrl: ProviderKind = {
    configure(ctx) {
      const start = localKind({ prefix: `u${randomText(4)}`, uidBase: 300_000 + Math.floor(Math.random() * 600) * 1000, uidCount: 1000 }).configure(ctx)
      return async () => {
        const inner = await start()
        const wrapped = new WeakMap<Sandbox, Sandbox>()
        const wrap = (sb: Sandbox | null) => {
          if (!sb) return null
          let out = wrapped.get(sb)
          if (!out) {
            out = overlay(sb, {
              resolvePreview: async (port: number) => {
                asked.push(port)
                return { url: siteOrigin }
              },
            })
            wrapped.set(sb, out)
          }
          return out
        }
        return overlay<SandboxProvider>(inner, { create: async (spec: Parameters<SandboxProvider['create']>[0]) => wrap(await inner.create(spec)), get: (id: string) => wrap(inner.get(id)) })
      }
    },
  }
  w = await startWarren('sqlite', { env: { ...NO_RATE_LIMITS, WARREN_SANDBOX_PROVIDER: 'url', WARREN_PREVIEW_NAME_HOLD_MS: '0' }, providers: { url: viaUrl } })
  fake = await startModelServer({ models: ['m1'] })
  base = await w.listen()
})
after(async () => {
  await w?.close()
  await fake?.close()
  site?.close()
})

it('sends a preview’s requests and upgrades to the URL the provider names, with its Host', async () => {
  const c = client(w, await newOrg(w))
  await c.connect(fake, 'openai')
  const sid = await c.session()
  await waitFor('the workspace runs', async () => (await c.getSession(sid)).environment.state === 'running', 60_000)
  const res = await c.call('POST', `/v1/sessions/${sid}/preview`, { port: 3000 })
  assert.equal(res.statusCode, 200, res.body)
  const host = `${res.json().subdomain}.${w.config.previewDomain}`

  const page = await hostRequest(base, host, '/some/page?x=1')
  assert.equal(page.status, 200, page.body)
  assert.deepEqual(JSON.parse(page.body), { host: new URL(siteOrigin).host, forwardedHost: host, path: '/some/page?x=1' })
  assert.ok(asked.includes(3000), `the provider was asked for port 3000, asked: ${asked.join(', ')}`)

  const ws = await openWebSocket(base, host, '/live')
  assert.equal(ws.status, 101, ws.head)
  assert.equal(await ws.next(), `upgraded with host ${new URL(siteOrigin).host}`)
  ws.close()
})
