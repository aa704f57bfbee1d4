// The egress proxy tells the service's log what it refused, and a target the caller wrote reaches
// the log bounded: a workspace cannot write a line of any length into the operator's log.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { startEgressProxy } from '../src/sandbox/local/egress-proxy.ts'

type Line = { obj: Record<string, unknown>; msg: string }

/** CONNECT through the proxy; resolves with the status it answered. */
function connectThrough(port: number, target: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method: 'CONNECT', path: target })
    req.on('connect', (res, socket) => (socket.destroy(), resolve(res.statusCode!)))
    req.on('response', (res) => (res.resume(), resolve(res.statusCode!)))
    req.on('error', reject).end()
  })
}

it('logs each refusal with the sandbox, the target and the reason, a long caller-written target cut and marked', async (t) => {
  const lines: Line[] = []
  const logger = { info: (obj: object, msg: string) => void lines.push({ obj: obj as Record<string, unknown>, msg }), warn: (obj: object, msg: string) => void lines.push({ obj: obj as Record<string, unknown>, msg }) }
  const proxy = await startEgressProxy({ host: '127.0.0.1', resolveSandbox: () => ({ allow: ['site.test'] }), allowPrivate: [], logger })
  t.after(() => proxy.close())

  assert.equal(await connectThrough(proxy.port, 'elsewhere.test:443'), 403)
  const off = lines.find((l) => l.obj.target === 'elsewhere.test')
  assert.ok(off, `no refusal logged: ${JSON.stringify(lines)}`)
  assert.equal(off.msg, 'egress refused')
  assert.equal(off.obj.status, 403)
  assert.match(String(off.obj.reason), /not on this sandbox's allowlist/)
  assert.equal(off.obj.sandbox, '127.0.0.1')

  const long = `${'a'.repeat(5000)}.test`
  assert.equal(await connectThrough(proxy.port, `${long}:443`), 400)
  const cut = lines.find((l) => l.obj.reason === 'invalid host')
  assert.ok(cut, `no refusal logged: ${JSON.stringify(lines.map((l) => l.obj.reason))}`)
  assert.ok(String(cut.obj.target).length <= 260, `the target reached the log ${String(cut.obj.target).length} bytes long`)
  assert.ok(long.startsWith(String(cut.obj.target)))
  assert.equal(cut.obj.target_cut_from, long.length)
})

it('logs a sandbox’s refusals up to its budget a minute, then counts them and says the count once the minute is over', async (t) => {
  const lines: Line[] = []
  const logger = { info: (obj: object, msg: string) => void lines.push({ obj: obj as Record<string, unknown>, msg }), warn: (obj: object, msg: string) => void lines.push({ obj: obj as Record<string, unknown>, msg }) }
  let clock = 1_000_000
  const proxy = await startEgressProxy({ host: '127.0.0.1', resolveSandbox: () => ({ allow: ['site.test'] }), allowPrivate: [], logger, refusalLogsPerMinute: 3, now: () => clock })
  t.after(() => proxy.close())

  for (let i = 0; i < 10; i++) assert.equal(await connectThrough(proxy.port, `n${i}.test:443`), 403)
  assert.deepEqual(lines.map((l) => l.obj.target), ['n0.test', 'n1.test', 'n2.test'], 'three lines, then none')
  clock += 60_000
  assert.equal(await connectThrough(proxy.port, 'later.test:443'), 403)
  assert.deepEqual(lines.slice(3).map((l) => [l.msg, l.obj.unlogged ?? l.obj.target]), [['egress refusals past the log budget', 7], ['egress refused', 'later.test']])
})
