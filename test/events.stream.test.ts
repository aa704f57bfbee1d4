// The event streams through real sockets: frames to the letter, resume by seq, the replay-to-live
// hand-over under concurrent writers, the replay ceiling, the organization stream's scope, the
// stream ceilings, back-pressure on a reader that stops reading, and pings.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import type { AnyEvent } from '../src/events/events.schema.ts'
import { withEvents } from '../src/events/record-event.ts'
import { errorOf, forEachDialect, onPostgres, startWarren, useWarren, type Warren } from './harness.ts'
import { connectModel, waitFor } from './fixtures.ts'
import { openSse, type Frame, type SseClient } from './sse-client.ts'
import { NO_RATE_LIMITS, client } from './turns.helpers.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'

const DATA_KEYS = ['created_at', 'internal_type', 'object', 'payload', 'seq', 'session_id', 'type']

/** Records events the way the service does (one transaction, bus woken after commit); returns their seqs. */
async function emit(w: Warren, orgId: string, sessionId: string, events: AnyEvent[]): Promise<number[]> {
  return withEvents(w.store, w.bus, async (_trx, record) => {
    const seqs: number[] = []
    for (const e of events) seqs.push((await record({ orgId, sessionId, type: e.type, payload: e.payload })).seq)
    return seqs
  })
}
const messages = (n: number, tag = 'm') => Array.from({ length: n }, (_, i) => ({ type: 'agent.message' as const, payload: { text: `${tag}${i}` } }))

const seqs = (frames: Frame[]) => frames.filter((f) => f.id !== undefined).map((f) => Number(f.id))
const texts = (frames: Frame[]) => frames.filter((f) => f.event === 'agent.message').map((f) => f.data.payload.text as string)

forEachDialect('event streams', (dialect) => {
  // A stream re-reads the store at every ping, which would hide a live hand-over that lost a
  // wake-up: the ping here is longer than any wait.
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_SSE_PING_MS: '120000' } })
  let base = ''
  const open: SseClient[] = []
  const sse = async (path: string, opts: { token?: string; lastEventId?: string } = {}) => {
    const c = await openSse(base, path, { token: opts.token ?? w().token, lastEventId: opts.lastEventId })
    open.push(c)
    return c
  }
  const newSession = async (token = w().token) => {
    const res = await w().inject({ method: 'POST', url: '/v1/sessions', payload: {}, token })
    assert.equal(res.statusCode, 201, res.body)
    const id = res.json().id as string
    // Its workspace comes up in the background; wait for sandbox.created so that no event of the
    // session's own start lands in the middle of what a test writes.
    await waitFor('the workspace', () => w().store.db.selectFrom('events').select('seq').where('session_id', '=', id).where('type', '=', 'sandbox.created').executeTakeFirst())
    return id
  }
  const closeAll = async () => {
    for (const c of open.splice(0)) c.close()
  }

  it('starts: listens, a model is connected', async () => {
    base = await w().listen()
    await connectModel(w())
  })

  it('sends frames to the letter: retry hint, id = seq, published names, internal events withheld', async () => {
    const sid = await newSession()
    const before = await emit(w(), w().orgId, sid, [
      { type: 'agent.message', payload: { text: 'hello\nworld "quoted"' } },
      { type: 'session.working', payload: { session_id: sid, status: 'working' } },
      { type: 'session.error', payload: { message: 'a seed file failed' } },
    ])
    const c = await sse(`/v1/sessions/${sid}/events?last_event_id=0`)
    assert.equal(c.status, 200)
    assert.match(String(c.headers['content-type']), /^text\/event-stream/)
    assert.match(String(c.headers['cache-control']), /no-cache/)
    assert.equal(c.headers['x-accel-buffering'], 'no')
    assert.match(String(c.headers['x-request-id']), /^req_/)
    assert.ok(c.headers['x-ratelimit-limit'], 'the rate-limit figures are sent on the stream too')
    const got = await c.until('the two published events', (ev) => ev.some((f) => f.event === 'agent.error'))
    assert.equal(c.frames[0]!.retry, '2000', 'the retry hint comes first')
    const message = got.find((f) => f.event === 'agent.message')!
    assert.equal(message.id, String(before[0]))
    assert.deepEqual(Object.keys(message.data).sort(), DATA_KEYS)
    assert.deepEqual(message.data, {
      object: 'event',
      type: 'agent.message',
      internal_type: 'agent.message',
      session_id: sid,
      seq: before[0],
      created_at: message.data.created_at,
      payload: { text: 'hello\nworld "quoted"' },
    })
    assert.equal(typeof message.data.created_at, 'number')
    const error = got.find((f) => f.event === 'agent.error')!
    assert.equal(error.data.type, 'agent.error')
    assert.equal(error.data.internal_type, 'session.error', 'the service’s own name travels beside the published one')
    assert.equal(error.id, String(before[2]))
    // Everything this session persisted and published: sandbox.created from its start, then ours.
    assert.ok(got.every((f) => f.event !== 'session.working' && f.data.type !== 'session.working'), 'internal events never leave the service')
    const published = (await w().store.db.selectFrom('events').select(['seq', 'type']).where('session_id', '=', sid).orderBy('seq').execute()).filter(
      (r) => !r.type.startsWith('session.') || r.type === 'session.error',
    )
    assert.deepEqual(seqs(got), published.map((r) => Number(r.seq)))

    // Live-only frames: no id line, seq null, never replayed.
    w().bus.publish({ orgId: w().orgId, sessionId: sid, turnId: null, type: 'agent.text', createdAt: Date.now(), payload: { delta: 'tok' } })
    const delta = (await c.until('a delta', (ev) => ev.some((f) => f.event === 'agent.text'))).find((f) => f.event === 'agent.text')!
    assert.equal(delta.id, undefined)
    assert.deepEqual(delta.data, { object: 'event', type: 'agent.text', internal_type: 'agent.text', session_id: sid, seq: null, created_at: delta.data.created_at, payload: { delta: 'tok' } })
    const again = await sse(`/v1/sessions/${sid}/events?last_event_id=0`)
    await again.until('the replay', (ev) => seqs(ev).length === published.length)
    assert.equal(again.events().some((f) => f.event === 'agent.text'), false, 'a transient event is never replayed')
    await closeAll()
  })

  it('resumes by cursor: none is live only, 0 everything, n what follows n; the header wins over the query', async () => {
    const sid = await newSession()
    const old = await emit(w(), w().orgId, sid, messages(3, 'old'))
    const liveOnly = await sse(`/v1/sessions/${sid}/events`)
    const all = await sse(`/v1/sessions/${sid}/events?last_event_id=0`)
    const after = await sse(`/v1/sessions/${sid}/events?last_event_id=${old[0]}`)
    const header = await sse(`/v1/sessions/${sid}/events?last_event_id=0`, { lastEventId: String(old[1]) })
    await all.until('the replay', (ev) => texts(ev).length === 3)
    await after.until('the replay after the first', (ev) => texts(ev).length === 2)
    await header.until('the replay after the second', (ev) => texts(ev).length === 1)
    // The live-only stream has sent its open frame; anything committed from now reaches it.
    await liveOnly.until('the open frame', () => liveOnly.frames.length > 0)
    const fresh = await emit(w(), w().orgId, sid, messages(2, 'new'))
    for (const [c, want] of [
      [liveOnly, ['new0', 'new1']],
      [all, ['old0', 'old1', 'old2', 'new0', 'new1']],
      [after, ['old1', 'old2', 'new0', 'new1']],
      [header, ['old2', 'new0', 'new1']],
    ] as const) {
      await c.until(`${want.join(',')}`, (ev) => texts(ev).length >= want.length)
      assert.deepEqual(texts(c.events()), want)
    }
    assert.deepEqual(seqs(liveOnly.events()), fresh)
    await closeAll()
  })

  it('refuses a cursor that is not a seq, an unknown query field, another organization’s session, and a token without sessions:read', async () => {
    const sid = await newSession()
    for (const [path, header] of [
      [`/v1/sessions/${sid}/events?last_event_id=-1`, undefined],
      [`/v1/sessions/${sid}/events?last_event_id=abc`, undefined],
      // Numbers in other spellings, which a loose reading of the integer would take.
      [`/v1/sessions/${sid}/events?last_event_id=1e3`, undefined],
      [`/v1/sessions/${sid}/events?last_event_id=0x10`, undefined],
      [`/v1/sessions/${sid}/events?last_event_id=%2B5`, undefined],
      [`/v1/sessions/${sid}/events?last_event_id=`, undefined],
      [`/v1/events?last_event_id=99999999999999999999`, undefined],
      [`/v1/sessions/${sid}/events`, 'x7'],
      [`/v1/events?cursor=1`, undefined],
    ] as const) {
      const res = await w().inject({ method: 'GET', url: path, headers: header ? { 'last-event-id': header } : {} })
      assert.equal(res.statusCode, 400, `${path} ${header}: ${res.body}`)
      assert.equal(errorOf(res).code, 'invalid_request')
    }
    const other = await w().mint()
    const res = await w().inject({ method: 'GET', url: `/v1/sessions/${sid}/events`, token: other.token })
    assert.equal(res.statusCode, 404)
    assert.equal(errorOf(res).code, 'not_found')
    const narrow = await w().mint(undefined, ['sessions:write'])
    const denied = await w().inject({ method: 'GET', url: '/v1/events', token: narrow.token })
    assert.equal(denied.statusCode, 403)
    assert.match(errorOf(denied).message, /sessions:read/)
  })

  it('walks a replay of many pages to its end, in seq order', async () => {
    const sid = await newSession()
    const written = await emit(w(), w().orgId, sid, messages(2_345))
    const c = await sse(`/v1/sessions/${sid}/events?last_event_id=${written[0]! - 1}`)
    await c.until('2,345 events', (ev) => texts(ev).length === 2_345, 60_000)
    assert.deepEqual(seqs(c.events()), written)
    await closeAll()
  })

  it('hands over from replay to live without losing or repeating an event while writers are busy', async () => {
    const sid = await newSession()
    const first = await emit(w(), w().orgId, sid, messages(200, 'pre'))
    const writers = 4
    const rounds = 60
    const written: number[] = [...first]
    let stop = false
    const busy = Array.from({ length: writers }, (_, k) =>
      (async () => {
        for (let i = 0; i < rounds && !stop; i++) written.push(...(await emit(w(), w().orgId, sid, messages(1 + (i % 3), `w${k}.${i}.`))))
      })(),
    )
    // Connect while the writers run: the replay of what is there meets the events being written.
    const session = await sse(`/v1/sessions/${sid}/events?last_event_id=0`)
    const org = await sse(`/v1/events?last_event_id=${first[0]! - 1}`)
    await Promise.all(busy)
    stop = true
    const expected = written.sort((a, b) => a - b)
    for (const c of [session, org]) {
      await c.until('every written event', (ev) => texts(ev).length >= expected.length, 60_000)
      const got = seqs(c.events()).filter((s) => expected.includes(s))
      assert.deepEqual(got, expected, 'each event exactly once, in seq order')
      const all = seqs(c.events())
      assert.equal(new Set(all).size, all.length, 'no frame repeated')
    }
    await closeAll()
  })

  it('stops a replay past the ceiling with service.replay_truncated, then goes live; from_seq collects the rest', async () => {
    // The ceiling is the deployment's WARREN_REPLAY_LIMIT; this instance's config is narrowed to 50.
    const limit = 50
    const saved = w().config.replayLimit
    w().config.replayLimit = limit
    try {
      const sid = await newSession()
      const written = await emit(w(), w().orgId, sid, messages(120))
      const start = written[0]! - 1
      const c = await sse(`/v1/sessions/${sid}/events?last_event_id=${start}`)
      const ev = await c.until('the truncation frame', (e) => e.some((f) => f.event === 'service.replay_truncated'))
      const at = ev.findIndex((f) => f.event === 'service.replay_truncated')
      assert.deepEqual(seqs(ev.slice(0, at)), written.slice(0, limit))
      const t = ev[at]!
      assert.equal(t.id, undefined, 'not persisted: no id')
      assert.deepEqual(Object.keys(t.data).sort(), ['from_seq', 'note', 'object', 'seq', 'type'])
      assert.equal(t.data.object, 'event')
      assert.equal(t.data.type, 'service.replay_truncated')
      assert.equal(t.data.seq, null)
      assert.equal(t.data.from_seq, written[limit - 1])
      assert.match(t.data.note, /50/)
      // Then live frames: a new event arrives, and nothing of the skipped rest.
      const [fresh] = await emit(w(), w().orgId, sid, messages(1, 'live'))
      await c.until('the live event', (e) => seqs(e).includes(fresh!))
      assert.deepEqual(seqs(c.events()).slice(limit), [fresh])
      // Reconnecting from from_seq collects the next 50, truncated again at the ceiling.
      const rest = await sse(`/v1/sessions/${sid}/events?last_event_id=${t.data.from_seq}`)
      const more = await rest.until('the second truncation', (e) => e.some((f) => f.event === 'service.replay_truncated'))
      assert.deepEqual(seqs(more), written.slice(limit, 2 * limit))
      // Exactly the ceiling waiting (49 of the first batch and the live one) is not truncated.
      const exact = await sse(`/v1/sessions/${sid}/events?last_event_id=${written[120 - limit]}`)
      await exact.until('fifty', (e) => seqs(e).length >= limit)
      assert.deepEqual(seqs(exact.events()), [...written.slice(120 - limit + 1), fresh])
      assert.equal(exact.events().some((f) => f.event === 'service.replay_truncated'), false)
    } finally {
      w().config.replayLimit = saved
      await closeAll()
    }
  })

  it('the organization stream shows sessions created after it connected, and nothing of another organization', async () => {
    const other = await w().mint()
    await connectModel(w(), ['gpt-test'], other.token)
    const mine = await sse('/v1/events')
    const theirs = await sse('/v1/events', { token: other.token })
    await mine.until('open', () => mine.frames.length > 0)
    await theirs.until('open', () => theirs.frames.length > 0)
    const late = await newSession()
    const foreign = await newSession(other.token)
    const [m] = await emit(w(), w().orgId, late, messages(1, 'mine'))
    const [f] = await emit(w(), other.orgId, foreign, messages(1, 'theirs'))
    await mine.until('the new session’s event', (ev) => seqs(ev).includes(m!))
    await theirs.until('the other organization’s event', (ev) => seqs(ev).includes(f!))
    assert.ok(mine.events().some((e) => e.data.session_id === late && e.event === 'sandbox.created'), 'the new session’s own lifecycle shows too')
    assert.equal(mine.events().some((e) => e.data.session_id === foreign), false)
    assert.equal(theirs.events().some((e) => e.data.session_id === late), false)
    // Transient events are scoped the same way.
    w().bus.publish({ orgId: other.orgId, sessionId: foreign, turnId: null, type: 'agent.text', createdAt: Date.now(), payload: { delta: 'x' } })
    w().bus.publish({ orgId: w().orgId, sessionId: late, turnId: null, type: 'agent.text', createdAt: Date.now(), payload: { delta: 'y' } })
    await mine.until('my delta', (ev) => ev.some((e) => e.event === 'agent.text'))
    assert.deepEqual(mine.events().filter((e) => e.event === 'agent.text').map((e) => e.data.payload.delta), ['y'])
    await closeAll()
  })

  it('ends a session’s stream when the session is deleted', async () => {
    const sid = await newSession()
    const c = await sse(`/v1/sessions/${sid}/events?last_event_id=0`)
    await c.until('open', (ev) => ev.length > 0)
    const res = await w().inject({ method: 'DELETE', url: `/v1/sessions/${sid}` })
    assert.equal(res.statusCode, 200, res.body)
    await waitFor('the stream ends', async () => c.isEnded())
  })

  it('holds 5 streams per token and 20 per organization; over it a readable 429 with Retry-After; a closed stream frees its slot', async () => {
    // Five tokens of one fresh organization (mint finds or makes the organization by name).
    const name = `ceiling-${Math.random().toString(36).slice(2)}`
    const tokens = await Promise.all([0, 1, 2, 3, 4].map(async () => (await w().mint(name)).token))
    const streams: SseClient[] = []
    for (let i = 0; i < 5; i++) {
      const c = await sse('/v1/events', { token: tokens[0] })
      assert.equal(c.status, 200)
      streams.push(c)
    }
    const sixth = await sse('/v1/events', { token: tokens[0] })
    assert.equal(sixth.status, 429)
    assert.match(String(sixth.headers['content-type']), /^application\/json/)
    const body = JSON.parse(sixth.body)
    assert.equal(body.error.code, 'rate_limit_exceeded')
    assert.match(body.error.message, /5 open event streams/)
    assert.ok(Number(sixth.headers['retry-after']) > 0, 'Retry-After in seconds')
    for (const t of tokens.slice(1, 4)) for (let i = 0; i < 5; i++) streams.push(await sse('/v1/events', { token: t }))
    assert.ok(streams.every((s) => s.status === 200))
    const twentyFirst = await sse('/v1/events', { token: tokens[4] })
    assert.equal(twentyFirst.status, 429)
    assert.match(JSON.parse(twentyFirst.body).error.message, /organization already has 20/)
    // The client goes away: its slot comes back promptly.
    streams[0]!.close()
    const again = await waitFor('a slot after a close', async () => {
      const c = await sse('/v1/events', { token: tokens[4] })
      return c.status === 200 && c
    })
    assert.equal(again.status, 200)
    await closeAll()
  })

  it('drops live-only frames for a reader that stops reading, cuts it past the ceiling, and a resume loses nothing', async () => {
    const sid = await newSession()
    const c = await sse(`/v1/sessions/${sid}/events`)
    await c.until('open', () => c.frames.length > 0)
    c.pause()
    // 16 MiB of deltas while it does not read: most are dropped once about 1 MiB waits unread.
    const delta = 'd'.repeat(64 * 1024)
    const persisted: number[] = []
    for (let i = 0; i < 256; i++) {
      w().bus.publish({ orgId: w().orgId, sessionId: sid, turnId: null, type: 'agent.text', createdAt: Date.now(), payload: { delta } })
      if (i % 32 === 0) persisted.push(...(await emit(w(), w().orgId, sid, messages(1, `p${i}`))))
      await new Promise((r) => setImmediate(r))
    }
    c.resume()
    await c.until('every persisted event', (ev) => persisted.every((s) => seqs(ev).includes(s)))
    const deltas = c.events().filter((f) => f.event === 'agent.text').length
    assert.ok(deltas < 256, `some live-only frames were dropped (received ${deltas} of 256)`)
    assert.equal(c.isEnded(), false, 'dropping kept it under the ceiling: still open')

    // Persisted frames are never dropped: past 8 MiB unread the connection is cut instead. A new
    // reader that never reads (the kernel's buffers grow only for a socket that is being read).
    const stalled = await sse(`/v1/sessions/${sid}/events`)
    await stalled.until('open', () => stalled.frames.length > 0)
    stalled.pause()
    const big = 'x'.repeat(256 * 1024)
    const written: number[] = []
    for (let i = 0; i < 96; i++) {
      written.push(...(await emit(w(), w().orgId, sid, [{ type: 'agent.message', payload: { text: big } }])))
      await new Promise((r) => setImmediate(r))
    }
    // Reading again, the client takes what the kernel still held and then sees the end.
    stalled.resume()
    await waitFor('the connection is cut', async () => stalled.isEnded())
    assert.ok(!seqs(stalled.frames).includes(written.at(-1)!), 'it was cut before the last event reached it')
    const lastSeen = seqs(stalled.frames).at(-1)!
    const resumed = await sse(`/v1/sessions/${sid}/events`, { lastEventId: String(lastSeen) })
    await resumed.until('the rest', (ev) => seqs(ev).includes(written.at(-1)!), 60_000)
    assert.deepEqual(
      [...seqs(stalled.frames), ...seqs(resumed.events())].filter((s) => s >= written[0]!),
      written,
      'what the cut stream delivered plus the resume: every event once',
    )
    await closeAll()
  })

  it('takes no account of slots a dead process left behind once they lapse', async () => {
    const t = await w().mint()
    // Five slots of a process that died a minute ago without giving them back.
    await w().store.db.insertInto('stream_slots').values([1, 2, 3, 4, 5].map((i) => ({ id: `stm_dead${i}`, token_id: t.id, org_id: t.orgId, expires_at: Date.now() - 60_000 }))).execute()
    const c = await sse('/v1/events', { token: t.token })
    assert.equal(c.status, 200)
    // Fresh ones count: five live slots of another process fill the token.
    await w().store.db.insertInto('stream_slots').values([1, 2, 3, 4].map((i) => ({ id: `stm_live${i}`, token_id: t.id, org_id: t.orgId, expires_at: Date.now() + 60_000 }))).execute()
    const over = await sse('/v1/events', { token: t.token })
    assert.equal(over.status, 429)
    await w().store.db.deleteFrom('stream_slots').where('id', 'like', 'stm_live%').execute()
    await closeAll()
  })
})

forEachDialect('event streams: pings and token checks', (dialect) => {
  const w = useWarren(dialect, { env: { ...NO_RATE_LIMITS, WARREN_SSE_PING_MS: '100' } })
  let base = ''
  const sse = (path: string, token = w().token) => openSse(base, path, { token })
  before(async () => {
    base = await w().listen()
  })

  it('ends a stream whose token is revoked while it is open', async () => {
    const t = await w().mint()
    const c = await sse('/v1/events', t.token)
    await c.until('open', () => c.frames.length > 0)
    const res = await w().inject({ method: 'DELETE', url: `/v1/tokens/${t.id}`, token: t.token })
    assert.equal(res.statusCode, 200, res.body)
    await waitFor('the stream ends', async () => c.isEnded())
  })

  it('pings every WARREN_SSE_PING_MS with a comment frame', async () => {
    const c = await sse('/v1/events')
    await waitFor('two pings', async () => c.frames.filter((f) => f.comment === 'ping').length >= 2)
    assert.ok(c.frames.filter((f) => f.comment === 'ping').every((f) => f.raw === ': ping'))
    c.close()
  })
})

describe('event streams in the OpenAPI description', () => {
  const w = useWarren('sqlite')
  it('declares text/event-stream for both streams', async () => {
    const doc = (await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })).json()
    for (const p of ['/v1/sessions/{session_id}/events', '/v1/events']) {
      const op = doc.paths[p].get
      assert.ok(op.responses['200'].content['text/event-stream'], `${p}: ${JSON.stringify(op.responses['200'])}`)
      assert.equal(op.responses['200'].content['application/json'], undefined)
      assert.ok(op.responses['429'], `${p} documents the stream ceiling`)
    }
  })
})

forEachDialect('event streams of a real turn', (dialect) => {
  const w = useWarren(dialect, { env: NO_RATE_LIMITS })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  it('streams a turn as it runs: its deltas live, its persisted events with ids, in order, and resumable', async () => {
    const base = await w().listen()
    const c = client(w(), { token: w().token, orgId: w().orgId })
    await c.connect(fake, 'openai')
    const sid = await c.session({})
    const live = await openSse(base, `/v1/sessions/${sid}/events?last_event_id=0`, { token: w().token })
    fake.script({ text: 'Hello from the stream.', delayMs: 5 })
    const turn = await c.accept(sid, 'say hello')
    const frames = await live.until('the turn’s end', (ev) => ev.some((f) => f.event === 'turn.ended'))
    const names = frames.map((f) => f.event)
    const at = (name: string) => names.indexOf(name)
    assert.ok(at('user.message') >= 0 && at('turn.started') >= 0, `the input and the start are recorded: ${names.join(' ')}`)
    assert.ok(at('turn.started') < at('agent.text'), 'deltas come after the start')
    assert.ok(at('agent.text') < at('agent.message'), 'deltas come before the settled message')
    assert.ok(at('agent.message') < at('turn.ended'))
    assert.equal(frames.filter((f) => f.event === 'agent.text').map((f) => f.data.payload.delta).join(''), 'Hello from the stream.')
    assert.ok(frames.filter((f) => f.event === 'agent.text').every((f) => f.id === undefined && f.data.seq === null))
    assert.deepEqual(frames.find((f) => f.event === 'turn.ended')!.data.payload, { turnId: turn.id })
    assert.ok(!names.includes('session.working') && !names.includes('turn.completed'), 'webhook-only events stay inside')
    // The same persisted frames, replayed, are the items of the session, seq for seq, up to the
    // last frame read: the workspace comes up in the background and may record sandbox.created
    // after a turn that never needed it has ended.
    const persisted = frames.filter((f) => f.id !== undefined).map((f) => [Number(f.id), f.event] as const)
    const items = await c.items(sid)
    assert.deepEqual(
      persisted,
      items.map((i) => [Number(i.id.slice(4)), i.detail.event] as const).filter(([seq]) => seq <= persisted.at(-1)![0]),
    )
    live.close()
  })
})

onPostgres('event streams across two processes on one store', () => {
  let a: Warren
  let b: Warren
  before(async () => {
    // Pings longer than any wait: a wake-up that did not cross between the processes would show.
    const env = { ...NO_RATE_LIMITS, WARREN_SSE_PING_MS: '120000' }
    a = await startWarren('postgres', { env })
    b = await startWarren('postgres', { env, pgSchema: a.pgSchema })
  })
  after(async () => {
    await b?.close()
    await a?.close()
  })

  it('a stream served by one process follows events written by the other, live and transient', async () => {
    const base = await b.listen()
    await connectModel(a)
    const res = await a.inject({ method: 'POST', url: '/v1/sessions', payload: {} })
    assert.equal(res.statusCode, 201, res.body)
    const sid = res.json().id as string
    const stream = await openSse(base, `/v1/events`, { token: a.token })
    await stream.until('open', () => stream.frames.length > 0)
    const written = await emit(a, a.orgId, sid, messages(5, 'from-a'))
    await stream.until('the events written by the other process', (ev) => written.every((s) => seqs(ev).includes(s)))
    a.bus.publish({ orgId: a.orgId, sessionId: sid, turnId: null, type: 'agent.text', createdAt: Date.now(), payload: { delta: 'across' } })
    const ev = await stream.until('the delta from the other process', (e) => e.some((f) => f.event === 'agent.text'))
    assert.equal(ev.find((f) => f.event === 'agent.text')!.data.payload.delta, 'across')
    stream.close()
  })

  it('holds the stream ceilings across both processes', async () => {
    const [baseA, baseB] = [await a.listen().catch(() => a.app.listeningOrigin), await b.listen().catch(() => b.app.listeningOrigin)]
    const t = await a.mint()
    const streams: SseClient[] = []
    for (let i = 0; i < 5; i++) streams.push(await openSse(i % 2 ? baseA : baseB, '/v1/events', { token: t.token }))
    assert.deepEqual(streams.map((s) => s.status), [200, 200, 200, 200, 200])
    for (const base of [baseA, baseB]) {
      const over = await openSse(base, '/v1/events', { token: t.token })
      assert.equal(over.status, 429, `the sixth stream, on ${base === baseA ? 'the first' : 'the second'} process`)
      assert.equal(JSON.parse(over.body).error.code, 'rate_limit_exceeded')
    }
    streams[0]!.close()
    const again = await waitFor('a slot freed on the other process', async () => {
      const c = await openSse(baseA, '/v1/events', { token: t.token })
      if (c.status !== 200) return false
      return c
    })
    again.close()
    for (const s of streams) s.close()
  })
})
