// The PostgreSQL bus's connection is a part an operator must hear about: losing it (other nodes
// then wake this one's readers late) and getting it back both reach the service's log.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import pg from 'pg'
import { onPostgres, PG_URL, startWarren } from './harness.ts'

type Line = { level: number; msg: string; component?: string; err?: { message?: string } }

/** A pino logger whose lines are kept, parsed, and can be awaited by message. */
function logCapture() {
  const lines: Line[] = []
  const waiting: { msg: string; resolve: (l: Line) => void }[] = []
  const write = (text: string) => {
    const line = JSON.parse(text) as Line
    lines.push(line)
    for (const w of waiting.filter((w) => w.msg === line.msg)) (waiting.splice(waiting.indexOf(w), 1), w.resolve(line))
  }
  const next = (msg: string, after = 0): Promise<Line> => {
    const seen = lines.slice(after).find((l) => l.msg === msg)
    return seen ? Promise.resolve(seen) : new Promise((resolve) => waiting.push({ msg, resolve }))
  }
  return { logger: { level: 'info', stream: { write } }, lines, next }
}

onPostgres('the event bus logs its connection', () => {
  it('logs at warn, with the cause, when its PostgreSQL connection is cut, and at info when it is back', async (t) => {
    const log = logCapture()
    const w = await startWarren('postgres', { logger: log.logger })
    t.after(() => w.close())
    const admin = new pg.Client({ connectionString: PG_URL })
    await admin.connect()
    t.after(() => admin.end())
    // This instance's bus alone (other runs share the server): its connection carries its channel's name.
    const channel = `warren_events_${w.pgSchema}`.toLowerCase()
    const busPid = async () => (await admin.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [channel])).rows.map((r) => r.pid)
    const before = await busPid()
    assert.equal(before.length, 1, `expected one bus connection named ${channel}`)
    const mark = log.lines.length
    await admin.query('SELECT pg_terminate_backend($1)', [before[0]])
    const lost = await log.next('the event bus lost its PostgreSQL connection: reconnecting', mark)
    assert.equal(lost.level, 40)
    assert.equal(lost.component, 'event-bus')
    assert.match(lost.err?.message ?? '', /terminat/i, 'the cause is not in the line')
    const back = await log.next('the event bus reconnected to PostgreSQL', mark)
    assert.equal(back.level, 30)
    const after = await busPid()
    assert.equal(after.length, 1)
    assert.notEqual(after[0], before[0], 'no new connection was made')
  })
})
