import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { request } from 'node:http'
import { createServer, type Server } from 'node:net'
import type { SandboxSpec } from '../src/sandbox/sandbox.ts'
import { startEgressProxy, type EgressProxy } from '../src/sandbox/local/egress-proxy.ts'
import { localNetwork, type SandboxNetwork } from '../src/sandbox/local/network.ts'

/**
 * The sandbox network layer against the real kernel: namespaces, veths, nftables. Traffic only
 * goes to loopback and to namespaces this file creates: "the internet" is a namespace `wt-site-…`
 * with an HTTP server, named `site.test` through the proxy's injected lookup. Every name carries
 * a random tag so two runs at once never touch each other's namespaces, veths or tables.
 */

const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0
const skip = process.getuid?.() !== 0 ? 'needs root' : !has('ip') || !has('nft') || !has('setpriv') ? 'needs ip, nft and setpriv' : false

const tag = (randomBytes(4).readUInt32BE() % 36 ** 3).toString(36).padStart(3, '0')
const prefix = `wt${tag}` // never starts with the production `wr`, so neither run's `wr*`/`wt…*` rules see the other
const table = `warren_t${tag}`
const siteNs = `wt-site-${tag}`
const siteVeth = `wx${tag}s`
// The site's /30 lies outside the sandbox pool used here (10.213.0.0/17).
const siteBase = `10.213.${128 + Math.floor(Math.random() * 127)}.${4 * Math.floor(Math.random() * 63)}`
const octets = siteBase.split('.').map(Number)
const siteHostSide = [...octets.slice(0, 3), octets[3] + 1].join('.')
const siteAddr = [...octets.slice(0, 3), octets[3] + 2].join('.')
const siteCidr = `${siteBase}/30`

const sh = (args: string[]) => execFileSync(args[0], args.slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
const quiet = (args: string[]) => spawnSync(args[0], args.slice(1), { stdio: 'ignore' })
/** The host side of a sandbox's /30, from its sandbox side (.2 → .1). */
const hostSide = (addr: string) => addr.replace(/\d+$/, (n) => String(Number(n) - 1))
const NOBODY = ['setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups', process.execPath, '-e']

/** Runs node as uid 65534 inside a namespace: what a sandboxed process could do. */
function asNobody(netns: string, script: string, args: string[] = []): Promise<string> {
  const child = spawn('ip', ['netns', 'exec', netns, ...NOBODY, script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
  return new Promise((resolve) => child.on('close', () => resolve(out.trim())))
}

const CLIENT = `
const [mode, a, b, c] = process.argv.slice(1); const http = require('http'), net = require('net')
const done = (r) => { console.log(JSON.stringify(r)); process.exit(0) }
setTimeout(() => done({ error: 'timeout' }), 2500)
const collect = (res) => { let body = ''; res.setEncoding('utf8'); res.on('data', (d) => body += d); res.on('end', () => done({ status: res.statusCode, body })) }
if (mode === 'tcp') { const s = net.connect({ host: a, port: +b, localAddress: c }); s.on('connect', () => done({ connected: true })); s.on('error', (e) => done({ error: e.code })) }
if (mode === 'plain') { const [h, p] = a.split(':'); const u = new URL(b); http.get({ host: h, port: +p, path: b, headers: { host: u.host } }, collect).on('error', (e) => done({ error: e.code })) }
if (mode === 'connect') { const [h, p] = a.split(':'); const req = http.request({ host: h, port: +p, method: 'CONNECT', path: b })
  req.on('connect', (res, socket) => { if (res.statusCode !== 200) return done({ status: res.statusCode })
    http.get({ createConnection: () => socket, path: c, headers: { host: b } }, collect).on('error', (e) => done({ error: e.code })) })
  req.on('response', collect); req.on('error', (e) => done({ error: e.code })); req.end() }
`
type Outcome = { status?: number; body?: string; error?: string; connected?: boolean }
const client = async (netns: string, ...args: string[]): Promise<Outcome> => JSON.parse(await asNobody(netns, CLIENT, args) || '{"error":"no output"}')
const tcp = (netns: string, host: string, port: number, from?: string) => client(netns, 'tcp', host, String(port), ...(from ? [from] : []))

const SERVER = `require('http').createServer((q, s) => s.end(process.argv[1] + ' ' + q.method + ' ' + q.url + ' host=' + q.headers.host))
  .listen(+process.argv[2], process.argv[3] || '0.0.0.0', () => console.log('ready'))`
const children: ChildProcess[] = []
/** An HTTP server inside a namespace, started as uid 65534; resolves once it listens. */
function serveIn(netns: string, name: string, port: number, address = '0.0.0.0'): Promise<void> {
  const child = spawn('ip', ['netns', 'exec', netns, ...NOBODY, SERVER, name, String(port), address], { stdio: ['ignore', 'pipe', 'inherit'] })
  children.push(child)
  return new Promise((resolve, reject) => {
    child.stdout!.once('data', () => resolve())
    child.once('exit', (code) => reject(new Error(`server ${name} exited ${code}`)))
  })
}

const hostGet = (host: string, port: number, path: string) => new Promise<Outcome>((resolve) => {
  const req = request({ host, port, path, timeout: 2000 }, (res) => {
    let body = ''
    res.setEncoding('utf8').on('data', (d: string) => (body += d)).on('end', () => resolve({ status: res.statusCode, body }))
  })
  req.on('timeout', () => req.destroy(new Error('timeout'))).on('error', (e) => resolve({ error: e.message })).end()
})

const spec = (id: string, allow: string[]): SandboxSpec =>
  ({ id, workspaceMount: '/workspace', env: {}, network: { allow }, limits: { memoryBytes: 1 << 28, pids: 64, cpus: 1 } })
const listTable = () => sh(['nft', 'list', 'table', 'inet', table])
const namespaces = () => sh(['ip', 'netns', 'list'])

describe('sandbox network (netns + nftables + egress proxy)', { skip }, () => {
  let proxy: EgressProxy
  let network: SandboxNetwork
  let hostService: Server
  const a = { id: `a-${tag}`, netns: '', previewHost: '', hostAddr: '', env: {} as Record<string, string> }
  const [b, none] = [{ ...a, id: `b-${tag}` }, { ...a, id: `none-${tag}` }]
  const lookupTable: Record<string, string> = { 'site.test': siteAddr, 'www.site.test': siteAddr, 'loop.test': '127.0.0.1', 'mapped.test': '::ffff:127.0.0.1' }

  before(async () => {
    // "The internet": a namespace of its own, reachable from the host only (not routed to sandboxes).
    for (const cmd of [`netns add ${siteNs}`, `link add ${siteVeth} type veth peer name eth0 netns ${siteNs}`,
      `addr add ${siteHostSide}/30 dev ${siteVeth}`, `link set ${siteVeth} up`,
      `-n ${siteNs} addr add ${siteAddr}/30 dev eth0`, `-n ${siteNs} link set eth0 up`]) sh(['ip', ...cmd.split(' ')])
    await serveIn(siteNs, 'site', 8080)
    proxy = await startEgressProxy({
      host: '127.0.0.1',
      resolveSandbox: (remote, local) => network.resolve(remote, local),
      allowPrivate: [siteCidr],
      lookup: async (name) => {
        const address = lookupTable[name]
        if (!address) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' })
        return [{ address, family: address.includes(':') ? 6 : 4 }]
      },
    })
    network = localNetwork({ proxy, prefix, table, subnet: '10.213.0.0/17' })
    for (const [box, allow] of [[a, ['site.test', '*.site.test', 'loop.test', 'inner.test', 'sib.test', 'mapped.test']], [b, ['site.test']], [none, []]] as const) {
      const got = await network.attach(spec(box.id, [...allow]))
      Object.assign(box, { netns: got.netnsName, previewHost: got.previewHost, env: got.env, hostAddr: hostSide(got.previewHost) })
    }
    lookupTable['inner.test'] = a.hostAddr // the host itself, through its veth address
    lookupTable['sib.test'] = b.previewHost // a private address: another sandbox
    hostService = createServer((s) => s.end('host service\n'))
    await new Promise<void>((resolve) => hostService.listen(0, a.hostAddr, resolve))
    await serveIn(b.netns, 'sandbox-b', 4000)
    await serveIn(none.netns, 'sandbox-none', 4000)
    await serveIn(b.netns, 'sandbox-b-loopback', 4001, '127.0.0.1')
  })

  after(async () => {
    for (const c of children) c.kill('SIGKILL')
    hostService?.close()
    for (const box of [a, b, none]) await network?.detach(box.id).catch(() => {})
    await proxy?.close()
    // Whatever a failed test left: every name below carries this run's tag.
    for (const l of sh(['ip', '-o', 'link', 'show']).split('\n')) {
      const name = /^\d+:\s+([^@:\s]+)/.exec(l)?.[1]
      if (name?.startsWith(prefix) || name === siteVeth) quiet(['ip', 'link', 'del', name])
    }
    for (const ns of namespaces().split('\n').map((l) => l.split(' ')[0])) if (ns.startsWith(`${prefix}-`)) quiet(['ip', 'netns', 'del', ns])
    quiet(['ip', 'netns', 'del', siteNs])
    quiet(['nft', 'delete', 'table', 'inet', table])
  })

  it('attach names the namespace, hands out proxy env only with an allowlist, previews on the sandbox side', () => {
    assert.match(a.netns, new RegExp(`^${prefix}-[0-9a-f]{10}$`))
    assert.match(namespaces(), new RegExp(a.netns))
    assert.equal(a.env.HTTPS_PROXY, `http://${a.hostAddr}:${proxy.port}`)
    assert.ok(a.env.http_proxy === a.env.HTTP_PROXY && a.env.NO_PROXY.includes('localhost'))
    assert.deepEqual(none.env, {})
    assert.notEqual(a.previewHost, b.previewHost)
    assert.ok(listTable().includes(a.previewHost) && !listTable().includes(none.previewHost))
    assert.equal(sh(['ip', '-n', a.netns, '-6', 'addr', 'show']).trim(), '', 'no IPv6 inside')
    assert.doesNotMatch(sh(['ip', '-n', a.netns, 'route', 'show']), /default/)
  })

  it('an allowed domain works through the proxy, plain HTTP and CONNECT, globs included', async () => {
    const [plain, tunnel, glob, env] = await Promise.all([
      client(a.netns, 'plain', `${a.hostAddr}:${proxy.port}`, 'http://site.test:8080/plain'),
      client(a.netns, 'connect', `${a.hostAddr}:${proxy.port}`, 'site.test:8080', '/tunnel'),
      client(a.netns, 'connect', `${a.hostAddr}:${proxy.port}`, 'www.site.test:8080', '/glob'),
      has('curl')
        ? asNobody(a.netns, `process.stdout.write(require('child_process').execFileSync('curl', ['-sS', '-m', '3', 'http://site.test:8080/env'], { env: { ...process.env, ...JSON.parse(process.argv[1]) } }))`, [JSON.stringify(a.env)])
        : Promise.resolve(null), // no curl here: the env is still checked by the first test
    ])
    assert.deepEqual(plain, { status: 200, body: 'site GET /plain host=site.test:8080' })
    assert.deepEqual(tunnel, { status: 200, body: 'site GET /tunnel host=site.test:8080' })
    assert.equal(glob.status, 200)
    if (env !== null) assert.match(env, /^site GET \S*\/env host=site\.test:8080$/)
  })

  it('refuses domains off the allowlist with 403 and a reason', async () => {
    const proxyAt = `${a.hostAddr}:${proxy.port}`
    const [plain, tunnel, deep, literal] = await Promise.all([
      client(a.netns, 'plain', proxyAt, 'http://evil.test:8080/'),
      client(a.netns, 'connect', proxyAt, 'evil.test:443', '/'),
      client(a.netns, 'plain', proxyAt, 'http://deep.www.site.test:8080/'), // `*` is one label
      client(a.netns, 'connect', proxyAt, `${siteAddr}:8080`, '/'),
    ])
    assert.deepEqual([plain.status, tunnel.status, deep.status, literal.status], [403, 403, 403, 403])
    assert.match(plain.body!, /not on this sandbox's allowlist/)
  })

  it('refuses allowed names that resolve to loopback, private or host addresses', async () => {
    const proxyAt = `${a.hostAddr}:${proxy.port}`
    const results = await Promise.all([
      client(a.netns, 'plain', proxyAt, 'http://loop.test:5432/'),
      client(a.netns, 'connect', proxyAt, 'loop.test:5432', '/'),
      client(a.netns, 'connect', proxyAt, 'mapped.test:6379', '/'),
      client(a.netns, 'connect', proxyAt, `inner.test:${(hostService.address() as { port: number }).port}`, '/'),
      client(a.netns, 'plain', proxyAt, 'http://sib.test:4000/'),
    ])
    for (const r of results) assert.equal(r.status, 403, JSON.stringify(r))
    assert.match(results[0].body!, /forbidden address/)
  })

  it('a sandbox reaches nothing directly: not the site, not host services, not other sandboxes', async () => {
    const hostPort = (hostService.address() as { port: number }).port
    const [site, loopPg, vethPg, vethOther, proxyOk, otherBox, otherProxy] = await Promise.all([
      tcp(a.netns, siteAddr, 8080),
      tcp(a.netns, '127.0.0.1', 5432),
      tcp(a.netns, a.hostAddr, 5432),
      tcp(a.netns, a.hostAddr, hostPort),
      tcp(a.netns, a.hostAddr, proxy.port),
      tcp(a.netns, b.previewHost, 4000),
      tcp(a.netns, hostSide(b.previewHost), proxy.port),
    ])
    assert.equal(proxyOk.connected, true, 'control: the proxy port is reachable')
    for (const r of [site, loopPg, vethPg, vethOther, otherBox, otherProxy]) assert.equal(r.connected, undefined, JSON.stringify(r))
    // Control: B's server is up, and the host (the preview path) reaches it.
    assert.equal((await hostGet(b.previewHost, 4000, '/')).status, 200)
    // A server listening on the sandbox's loopback only is reached too (previews of dev servers),
    // while another sandbox still cannot reach it.
    assert.deepEqual(await hostGet(b.previewHost, 4001, '/x'), { status: 200, body: `sandbox-b-loopback GET /x host=${b.previewHost}:4001` })
    assert.equal((await tcp(a.netns, b.previewHost, 4001)).connected, undefined)
    // Nor can another user of the host: only the service's own user opens connections into a sandbox.
    const asNobodyOnHost = spawnSync('setpriv', ['--reuid', '65534', '--regid', '65534', '--clear-groups', process.execPath, '-e', CLIENT, 'tcp', b.previewHost, '4001'], { encoding: 'utf8', timeout: 10_000 })
    assert.notEqual(JSON.parse(asNobodyOnHost.stdout.trim() || '{}').connected, true, asNobodyOnHost.stdout)
  })

  it('a sandbox without an allowlist reaches nothing, not even the proxy, yet previews work', async () => {
    const hostAddr = hostSide(none.previewHost)
    const [toProxy, viaProxy, site] = await Promise.all([
      tcp(none.netns, hostAddr, proxy.port),
      client(none.netns, 'plain', `${hostAddr}:${proxy.port}`, 'http://site.test:8080/'),
      tcp(none.netns, siteAddr, 8080),
    ])
    for (const r of [toProxy, viaProxy, site]) assert.equal(r.status ?? r.connected, undefined, JSON.stringify(r))
    assert.deepEqual(await hostGet(none.previewHost, 4000, '/p'), { status: 200, body: `sandbox-none GET /p host=${none.previewHost}:4000` })
    // setPolicy opens the door, and closes it again.
    const env = await network.setPolicy(none.id, { allow: ['site.test'] })
    assert.equal(env.HTTP_PROXY, `http://${hostAddr}:${proxy.port}`)
    assert.equal((await client(none.netns, 'plain', `${hostAddr}:${proxy.port}`, 'http://site.test:8080/')).status, 200)
    assert.deepEqual(await network.setPolicy(none.id, { allow: [] }), {})
    assert.equal((await tcp(none.netns, hostAddr, proxy.port)).connected, undefined)
  })

  it('the proxy refuses callers that are not sandboxes and bounds tunnels per sandbox', async () => {
    const unknown = await hostGet('127.0.0.1', proxy.port, 'http://site.test:8080/')
    assert.equal(unknown.status, 403)
    const small = await startEgressProxy({
      host: '127.0.0.1', resolveSandbox: () => ({ allow: ['site.test'] }), allowPrivate: [siteCidr],
      lookup: async () => [{ address: siteAddr, family: 4 }], maxConnectionsPerSandbox: 1,
    })
    try {
      const open = () => new Promise<{ status: number; done(): void }>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port: small.port, method: 'CONNECT', path: 'site.test:8080' })
        req.on('connect', (res, socket) => resolve({ status: res.statusCode!, done: () => socket.destroy() })).on('error', reject).end()
      })
      const [first, second] = [await open(), await open()].map((t) => (t.done(), t))
      assert.deepEqual([first.status, second.status], [200, 429])
    } finally {
      await small.close()
    }
  })

  it('the host rules hold on their own: without the namespace table, and against a spoofed source', async () => {
    const d = await network.attach(spec(`d-${tag}`, ['site.test']))
    try {
      const hostAddr = hostSide(d.previewHost)
      const service = createServer((s) => s.end('host service\n'))
      await new Promise<void>((resolve) => service.listen(0, hostAddr, resolve))
      // What root inside the namespace could do; sandboxed processes cannot (no CAP_NET_ADMIN there).
      sh(['ip', 'netns', 'exec', d.netnsName!, 'nft', 'delete', 'table', 'inet', 'warren_sandbox'])
      sh(['ip', '-n', d.netnsName!, 'addr', 'add', `${a.previewHost}/32`, 'dev', 'eth0'])
      const [proxyOk, other, pg, spoofed] = await Promise.all([
        tcp(d.netnsName!, hostAddr, proxy.port),
        tcp(d.netnsName!, hostAddr, (service.address() as { port: number }).port),
        tcp(d.netnsName!, hostAddr, 5432),
        tcp(d.netnsName!, hostAddr, proxy.port, a.previewHost),
      ])
      service.close()
      assert.equal(proxyOk.connected, true)
      for (const r of [other, pg, spoofed]) assert.equal(r.connected, undefined, JSON.stringify(r))
    } finally {
      await network.detach(`d-${tag}`)
    }
  })

  it('a pooled namespace reaches nothing and nothing reaches it until adopted; adoption applies the policy', async () => {
    const pooledNet = localNetwork({ proxy, prefix, table, subnet: '10.213.0.0/17', warm: 1 })
    const list = () => new Set(namespaces().split('\n').map((l) => l.split(' ')[0]).filter((n) => n.startsWith(`${prefix}-`)))
    const before = list()
    try {
      await pooledNet.warmUp()
      const fresh = [...list()].filter((n) => !before.has(n))
      assert.equal(fresh.length, 1, 'one pooled namespace')
      const ns = fresh[0]!
      const addr = /inet ([\d.]+)\//.exec(sh(['ip', '-n', ns, '-4', 'addr', 'show', 'eth0']))![1]!
      const hostAddr = hostSide(addr)
      assert.equal(sh(['ip', 'netns', 'pids', ns]).trim(), '', 'nothing runs in it')
      assert.ok(!listTable().includes(addr), 'no proxy_clients element')
      assert.equal(pooledNet.resolve(addr, hostAddr), null)
      assert.equal(network.resolve(addr, hostAddr), null)
      const hostPort = (hostService.address() as { port: number }).port
      const [toProxy, viaProxy, toHost, toSite, toOther] = await Promise.all([
        tcp(ns, hostAddr, proxy.port),
        client(ns, 'plain', `${hostAddr}:${proxy.port}`, 'http://site.test:8080/'),
        tcp(ns, a.hostAddr, hostPort),
        tcp(ns, siteAddr, 8080),
        tcp(ns, b.previewHost, 4000),
      ])
      for (const r of [toProxy, viaProxy, toHost, toSite, toOther]) assert.equal(r.status ?? r.connected, undefined, JSON.stringify(r))
      // Another sandbox cannot reach it either (nothing listens there yet; the host forwards nothing).
      const fromOther = await tcp(a.netns, addr, 4000)
      assert.equal(fromOther.connected, undefined, JSON.stringify(fromOther))

      // Adoption: the pooled namespace becomes the sandbox's, with its allowlist.
      const got = await pooledNet.attach(spec(`pool-${tag}`, ['site.test']))
      assert.equal(got.netnsName, ns)
      assert.equal(got.previewHost, addr)
      assert.equal(got.env.HTTP_PROXY, `http://${hostAddr}:${proxy.port}`)
      assert.deepEqual(pooledNet.resolve(addr, hostAddr), { allow: ['site.test'], deny: [] })
      assert.ok(listTable().includes(addr))
      // The proxy resolves through `network`; point it at pooledNet for this sandbox only.
      const resolve = network.resolve
      network.resolve = (r, l) => resolve(r, l) ?? pooledNet.resolve(r, l)
      try {
        assert.equal((await client(ns, 'plain', `${hostAddr}:${proxy.port}`, 'http://site.test:8080/pooled')).status, 200)
        assert.equal((await tcp(ns, siteAddr, 8080)).connected, undefined)
      } finally {
        network.resolve = resolve
      }
      // The pool refilled in the background; an adoption without an allowlist stays closed.
      await pooledNet.warmUp()
      const closedBox = await pooledNet.attach(spec(`pool2-${tag}`, []))
      assert.notEqual(closedBox.netnsName, ns)
      assert.deepEqual(closedBox.env, {})
      assert.equal((await tcp(closedBox.netnsName!, hostSide(closedBox.previewHost), proxy.port)).connected, undefined)
      await pooledNet.detach(`pool-${tag}`)
      await pooledNet.detach(`pool2-${tag}`)
      assert.doesNotMatch(namespaces(), new RegExp(ns))
    } finally {
      await pooledNet.detach(`pool-${tag}`)
      await pooledNet.detach(`pool2-${tag}`)
      await pooledNet.close()
    }
    assert.deepEqual([...list()].filter((n) => !before.has(n)), [], 'close removes the pooled namespaces')
  })

  it('detach removes the namespace, the veth and the rules', async () => {
    await network.detach(b.id)
    assert.doesNotMatch(namespaces(), new RegExp(b.netns))
    assert.doesNotMatch(sh(['ip', '-o', 'link', 'show']), new RegExp(`: ${b.netns.replace('-', '')}[@:]`))
    assert.ok(!listTable().includes(b.previewHost))
    assert.equal(network.resolve(b.previewHost), null)
    await network.detach(b.id) // idempotent
  })

  it('cleanupOrphans removes what a crashed run left and keeps what this process holds', async () => {
    const crashed = localNetwork({ proxy, prefix, table, subnet: '10.213.0.0/17' })
    const orphan = await crashed.attach(spec(`orphan-${tag}`, ['site.test']))
    await proxy.unlisten(hostSide(orphan.previewHost)) // the crashed process's listener died with it
    await network.cleanupOrphans()
    assert.doesNotMatch(namespaces(), new RegExp(orphan.netnsName!))
    assert.match(namespaces(), new RegExp(a.netns))
    assert.ok(!listTable().includes(orphan.previewHost), 'the stale proxy_clients element is pruned')
    assert.ok(listTable().includes(a.previewHost), 'the held one stays')
    assert.equal((await client(a.netns, 'plain', `${a.hostAddr}:${proxy.port}`, 'http://site.test:8080/still')).status, 200)

    await network.detach(a.id)
    await network.detach(none.id)
    await crashed.attach(spec(`orphan2-${tag}`, []))
    const restarted = localNetwork({ proxy, prefix, table, subnet: '10.213.0.0/17' })
    await restarted.cleanupOrphans()
    assert.doesNotMatch(namespaces(), new RegExp(`${prefix}-`))
    assert.doesNotMatch(sh(['ip', '-o', 'link', 'show']), new RegExp(`\\d+: ${prefix}`))
    assert.throws(() => listTable())
  })
})
