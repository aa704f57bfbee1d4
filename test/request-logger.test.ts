import { it } from 'node:test'
import assert from 'node:assert/strict'
import { Writable } from 'node:stream'
import Fastify from 'fastify'
import { forEachDialect, useWarren } from './harness.ts'
import { lazyChildLogger } from '../src/http/request-logger.ts'

/** Lines a Fastify (pino) logger writes, parsed. */
function collector(): { stream: Writable; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = []
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l.trim()) lines.push(JSON.parse(l))
      done()
    },
  })
  return { stream, lines }
}

// The per-request logger is made only when a request writes a line: these prove the lines are
// the same as ever, bound to the request's id, and that a level the logger drops writes none.
const info = collector()
const warn = collector()
forEachDialect('request logging', (dialect) => {
  const atInfo = useWarren(dialect, { logger: { level: 'info', stream: info.stream } })
  const atWarn = useWarren(dialect, { logger: { level: 'warn', stream: warn.stream } })

  it('logs each request in and out at info, bound to the id the answer carries', async () => {
    const res = await atInfo().inject({ method: 'GET', url: '/v1/health' })
    const id = res.headers['x-request-id']
    assert.match(String(id), /^req_/)
    const mine = info.lines.filter((l) => l.reqId === id)
    assert.deepEqual(mine.map((l) => l.msg), ['incoming request', 'request completed'])
    assert.equal((mine[1]!.res as { statusCode: number }).statusCode, 200)
    assert.equal(mine[0]!.level, 30)
  })

  it('writes no request line at warn', async () => {
    const before = warn.lines.length
    const res = await atWarn().inject({ method: 'GET', url: '/v1/health' })
    assert.equal(res.statusCode, 200)
    assert.deepEqual(warn.lines.slice(before).filter((l) => l.reqId === res.headers['x-request-id']), [])
  })
})

it('a request’s own lines at warn and above are written bound to its id; its level can be raised', async (t) => {
  const out = collector()
  const app = Fastify({ logger: { level: 'warn', stream: out.stream }, childLoggerFactory: lazyChildLogger, genReqId: () => `req_${++n}` })
  let n = 0
  t.after(() => app.close())
  app.get('/', async (req) => {
    req.log.info('dropped')
    req.log.error({ detail: 1 }, 'kept')
    req.log.level = 'debug'
    req.log.debug('raised')
    return {}
  })
  await app.inject({ method: 'GET', url: '/' })
  // Raised to debug, the request's own "request completed" (info) is written too, as pino's would be.
  assert.deepEqual(out.lines.map((l) => [l.msg, l.reqId]), [['kept', 'req_1'], ['raised', 'req_1'], ['request completed', 'req_1']])
  assert.equal(out.lines[0]!.detail, 1)
})

it('makes no child for a request that writes nothing its level keeps, and one for a request that does', () => {
  const made: Record<string, unknown>[] = []
  const written: unknown[][] = []
  const child = { level: 'warn', error: (...a: unknown[]) => written.push(a), info: () => assert.fail('info below warn was written') }
  const parent = { level: 'warn', child: (b: Record<string, unknown>) => (made.push(b), child) } as never
  const quiet = lazyChildLogger.call(null as never, parent, { reqId: 'req_q' }, {}, null as never)
  quiet.info('dropped')
  quiet.debug('dropped')
  assert.equal(quiet.level, 'warn')
  assert.deepEqual(made, [], 'a child was made for a request that wrote nothing')
  const loud = lazyChildLogger.call(null as never, parent, { reqId: 'req_l' }, {}, null as never)
  loud.error({ a: 1 }, 'kept')
  loud.error('again')
  assert.deepEqual(made, [{ reqId: 'req_l' }])
  assert.deepEqual(written, [[{ a: 1 }, 'kept'], ['again']])
})
