import { before, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { forEachDialect, useWarren, type Warren } from './harness.ts'
import { connectModel } from './fixtures.ts'
import { waitFor } from './fixtures.ts'
import { hostWorkspace } from './host-workspace.ts'

/**
 * What a workspace can reach, checked through HTTP: each probe is a template setup script (the
 * way a caller runs a command before turns exist), and it leaves its findings in the workspace.
 */
async function probe(w: Warren, script: string, extra: object = {}): Promise<{ id: string; dir: string; read(name: string): string }> {
  const tpl = await w.inject({ method: 'POST', url: '/v1/environment-templates', payload: { name: `probe${Math.random().toString(36).slice(2)}`, setup: `${script}\necho done > .probe-done` } })
  assert.ok(tpl.statusCode < 300, tpl.body)
  const res = await w.inject({ method: 'POST', url: '/v1/sessions', payload: { environment: { template: tpl.json().name }, ...extra } })
  assert.equal(res.statusCode, 201, res.body)
  const id = res.json().id as string
  const dir = hostWorkspace(w, id)
  await waitFor('the probe to finish', async () => fs.existsSync(path.join(dir, '.probe-done')), 30_000)
  return { id, dir, read: (name) => fs.readFileSync(path.join(dir, name), 'utf8').trim() }
}

/** A TCP connect attempt from inside, with bash's /dev/tcp: prints open or closed. */
const tcp = (host: string, port: number | string) => `(H=${host} P=${port} timeout 3 bash -c 'exec 3<>/dev/tcp/$H/$P' 2>/dev/null && echo open || echo closed)`

forEachDialect('workspace isolation, through HTTP', (dialect) => {
  const w = useWarren(dialect, { env: { WARREN_RATE_SESSIONS_PER_MIN: '1000', WARREN_RATE_GENERAL_PER_MIN: '100000', WARREN_IDLE_PAUSE_MS: '600000' } })
  before(async () => {
    await connectModel(w(), ['gpt-test'], undefined, 'sk-live-model-key-never-inside')
  })

  it('cannot read the data folder, the store, another workspace, or any model key', async () => {
    const other = await probe(w(), 'echo mine > other-secret.txt')
    const dataDir = w().config.dataDir
    const p = await probe(
      w(),
      [
        `ls ${dataDir} > data.txt 2>&1; echo $? > data.rc`,
        `cat ${dataDir}/warren.db > db.txt 2>&1; echo $? > db.rc`,
        `cat ${other.dir}/other-secret.txt > other.txt 2>&1; echo $? > other.rc`,
        `env > env.txt`,
        `(grep -rs sk-live-model-key-never-inside /proc/*/environ /etc /tmp 2>/dev/null | head -1) > leak.txt`,
        `id -u > uid.txt`,
      ].join('\n'),
    )
    assert.notEqual(p.read('data.rc'), '0', `data folder listed: ${p.read('data.txt')}`)
    assert.notEqual(p.read('db.rc'), '0', 'the store was readable')
    assert.notEqual(p.read('other.rc'), '0', `another workspace was readable: ${p.read('other.txt')}`)
    assert.ok(!p.read('other.txt').includes('mine'))
    const env = p.read('env.txt')
    for (const leak of ['sk-live-model-key-never-inside', 'DATABASE_URL', 'WARREN_', 'OPENAI', 'ANTHROPIC']) assert.ok(!env.includes(leak), `${leak} leaked into the workspace environment`)
    assert.equal(p.read('leak.txt'), '')
    assert.notEqual(p.read('uid.txt'), '0')
    assert.notEqual(fs.statSync(path.join(p.dir, 'env.txt')).uid, 0, 'files it writes are not owned by root on the host')
    for (const id of [other.id, p.id]) await w().inject({ method: 'DELETE', url: `/v1/sessions/${id}` })
  })

  it('reaches neither the host nor another workspace, and only allowlisted domains through the proxy', async (t) => {
    if (!fs.existsSync('/usr/bin/python3')) return t.skip('needs /usr/bin/python3 for a server inside the neighbouring workspace')
    // A host service listening on every interface, as a careless one would.
    const hostService = net.createServer((c) => c.end('hello'))
    await new Promise<void>((r) => hostService.listen(0, '0.0.0.0', r))
    t.after(() => hostService.close())
    const hostPort = (hostService.address() as net.AddressInfo).port
    const neighbour = await probe(w(), `ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1 > ip.txt\n(setsid python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1 &)\n` +
        // Python can take seconds to start on a loaded machine: wait until the server answers.
        `for i in $(seq 200); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8000), 1)' 2>/dev/null && break; sleep 0.1; done`)
    const neighbourIp = neighbour.read('ip.txt')
    // Control: the neighbour's server is up and reachable from the host (the preview path).
    const fromHost = await new Promise<boolean>((resolve) => {
      const c = net.connect(8000, neighbourIp, () => (c.destroy(), resolve(true)))
      c.on('error', () => resolve(false))
    })
    assert.equal(fromHost, true, 'control: the host reaches a server inside a workspace')
    const proxyCheck = (host: string) =>
      `(timeout 5 bash -c 'p=\${HTTP_PROXY#http://}; exec 3<>/dev/tcp/\${p%:*}/\${p##*:}; printf "CONNECT ${host}:443 HTTP/1.1\\r\\nHost: ${host}:443\\r\\n\\r\\n" >&3; head -1 <&3' 2>&1 || echo failed)`
    const p = await probe(
      w(),
      [
        `echo "$HTTP_PROXY" > proxy.txt`,
        `gw=$(echo "$HTTP_PROXY" | sed -E 's#http://([0-9.]+):.*#\\1#')`,
        `pp=$(echo "$HTTP_PROXY" | sed -E 's#.*:([0-9]+)$#\\1#')`,
        `${tcp('$gw', '$pp')} > proxy-port.txt`,
        `${tcp('$gw', hostPort)} > host-service.txt`,
        `${tcp('127.0.0.1', 5432)} > loopback-pg.txt`,
        `${tcp(neighbourIp, 8000)} > neighbour.txt`,
        `${proxyCheck('example.com')} > outside.txt`,
        // No address outside this machine is ever tried: the routing table says it all.
        `(ip route show default 2>&1 | grep -c default || true) > routes.txt`,
      ].join('\n'),
    )
    assert.match(p.read('proxy.txt'), /^http:\/\/[\d.]+:\d+$/, 'workspaces with an allowlist get the proxy')
    assert.equal(p.read('proxy-port.txt'), 'open', 'control: the probe can connect where it is allowed to')
    assert.match(neighbourIp, /^\d+\.\d+\.\d+\.\d+$/, 'control: the neighbour has an address to try')
    assert.equal(p.read('host-service.txt'), 'closed', 'a host service listening on every interface is out of reach')
    assert.equal(p.read('loopback-pg.txt'), 'closed', 'loopback is the workspace’s own')
    assert.equal(p.read('neighbour.txt'), 'closed', 'another workspace is out of reach')
    assert.match(p.read('outside.txt'), /403/, 'a domain outside the allowlist is refused by the proxy')
    assert.equal(p.read('routes.txt'), '0', 'no route around the proxy')
    for (const id of [neighbour.id, p.id]) await w().inject({ method: 'DELETE', url: `/v1/sessions/${id}` })
  })

  it('a session whose rules deny every domain gets no network at all', async (t) => {
    const hostService = net.createServer((c) => c.end('hello'))
    await new Promise<void>((r) => hostService.listen(0, '0.0.0.0', r))
    t.after(() => hostService.close())
    const hostPort = (hostService.address() as net.AddressInfo).port
    const p = await probe(w(), [`echo "proxy=$HTTP_PROXY" > proxy.txt`, `gw=$(ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1 | sed 's/\\.[0-9]*$/.1/')`, `echo "gw=$gw" > gw.txt`, `${tcp('$gw', hostPort)} > gw-any.txt`].join('\n'), {
      agent: { permission_rules: [{ decision: 'deny', domain: '**' }] },
    })
    assert.equal(p.read('proxy.txt'), 'proxy=')
    assert.equal(p.read('gw-any.txt'), 'closed')
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${p.id}` })
  })

  it('runs template setup under no_new_privs and the syscall filter, with no user namespace of its own', async () => {
    const p = await probe(w(), [
      `grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t ' ' ' > status.txt`,
      `unshare -U -r true 2> userns.txt; echo $? > userns.rc`,
    ].join('\n'))
    assert.equal(p.read('status.txt'), 'NoNewPrivs: 1\nSeccomp: 2')
    assert.notEqual(p.read('userns.rc'), '0', 'unshare -U -r succeeded')
    assert.match(p.read('userns.txt'), /Operation not permitted/)
    await w().inject({ method: 'DELETE', url: `/v1/sessions/${p.id}` })
  })
})
