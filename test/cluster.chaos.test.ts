// Chaos on a cluster (issue 25, item 8): three `warren serve` child processes on one PostgreSQL
// schema with a 4 s lease; nine sessions each send turns of two commands without pause while, every
// 15–30 s, one node is killed with everything it started and restarted, or paused past its lease
// and woken. Bounded in time and driven by a seed it prints (WARREN_CHAOS_SEED, WARREN_CHAOS_SECONDS
// repeat a run). What must hold, whatever the timing: every turn settles and completes; no model
// step is asked twice except one a death or pause cut; no command runs twice; no event is recorded
// twice; and a completed turn's changes survive every later loss of a node (a turn is completed only
// once what it changed is stored where every node reaches it).
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { randomInt } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { startCluster, type Cluster } from './cluster.ts'
import { connectModel, render, type Item } from './cluster.helpers.ts'
import { startModelServer, type FakeModelServer, type ModelRequest, type ScriptStep } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { onPostgres } from './harness.ts'

const SESSIONS = 9
const LEASE_MS = 4000
const SEED = Number(process.env.WARREN_CHAOS_SEED ?? randomInt(2 ** 31))
const SECONDS = Number(process.env.WARREN_CHAOS_SECONDS ?? 70)
/** How late the fake model server may stamp an ask after its node sent it (the test process is busy too). */
const ASK_LAG_MS = 1000
/** What the service tells the model of a tool call cut by its node's loss. */
const CUT = /whether it finished is unknown/

/** A small seeded generator (mulberry32): the same seed, the same schedule of kills and pauses. */
function seeded(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32
  }
}

/** Every process below `pid` (children first found, then theirs), read from /proc. */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>()
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    let stat: string
    try {
      stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8')
    } catch {
      continue // gone meanwhile
    }
    // The command name is in parentheses and may hold spaces: the fields after its last ')'.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
    const list = children.get(ppid) ?? []
    list.push(Number(entry))
    children.set(ppid, list)
  }
  const out: number[] = []
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) (out.push(c), walk(c))
  }
  walk(pid)
  return out
}

const signal = (pids: number[], sig: NodeJS.Signals) => {
  for (const p of pids) {
    try {
      process.kill(p, sig)
    } catch {
      // ended meanwhile: nothing to signal
    }
  }
}

type Chaos = { at: number; kind: 'kill' | 'pause'; node: number }
type Ask = { at: number; key: string }
type SentTurn = { session: number; index: number; sessionId: string; turnId: string; status: string; error: unknown }

/** One request to node `i` with a time limit: a paused node must not hold a caller for good. */
const request = (c: Cluster, i: number, method: string, url: string, body?: unknown, headers: Record<string, string> = {}) =>
  c.nodes[i]!.service.api(method, url, body, c.token, { headers, timeoutMs: 8000 })

onPostgres('cluster: chaos', () => {
  let fake: FakeModelServer
  let c: Cluster
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
    c = await startCluster({ nodes: 3, env: { WARREN_NODE_LEASE_MS: String(LEASE_MS) } })
    await connectModel(c, 0, fake)
  }, { timeout: 300_000 })
  after(async () => {
    await c?.close()
    await fake?.close()
  })

  /** The nodes' own words, for the reader of a failure: every line each wrote (warnings and up). */
  const keepLogs = (): string => {
    for (const n of c.nodes) fs.writeFileSync(path.join(os.tmpdir(), `warren-chaos-${SEED}-node${n.index}.log`), n.service.log.join('\n'))
    return `node logs: ${path.join(os.tmpdir(), `warren-chaos-${SEED}-node*.log`)}`
  }

  // Longer than the suite's limit per test: the run itself lasts SECONDS, then every session settles and is read.
  it(`nine sessions under kills and pauses (seed ${SEED}, ${SECONDS} s): every turn completes, nothing is asked, run or recorded twice, and no completed turn's changes are lost`, { timeout: SECONDS * 1000 + 480_000 }, async () => {
    try {
      await chaosRun()
    } catch (err) {
      process.stdout.write(`# chaos: ${keepLogs()}\n`)
      throw err
    }
  })

  async function chaosRun(): Promise<void> {
    process.stdout.write(`# chaos: WARREN_CHAOS_SEED=${SEED} WARREN_CHAOS_SECONDS=${SECONDS}\n`)
    const rand = seeded(SEED)
    const chaos: Chaos[] = []
    const asks: Ask[] = []
    const notes: string[] = []
    /** What `cat /workspace/log.txt` gave each session's check turn, as the model saw it. */
    const logs = new Map<number, string>()
    const say = (line: string) => {
      notes.push(`${new Date().toISOString().slice(11, 23)} ${line}`)
    }

    // The model: turn `chaos sK tN` runs command a, then command b, then answers; a command cut by
    // a node's loss is run again under a new call id (its effect went with the workspace's restore).
    // Every answer follows from the conversation alone, so a step asked again is answered the same.
    fake.fallback = (req: ModelRequest): ScriptStep => {
      const json = JSON.stringify(req.messages)
      const m = [...json.matchAll(/chaos s(\d+) (t\d+|check)/g)].at(-1)
      if (!m) return { error: { status: 500, message: 'not a chaos turn' } }
      const [s, t] = [m[1]!, m[2]!]
      const prefix = `c_${s}_${t}_`
      // Told mid-turn that the workspace came back from the last snapshot, the model takes the
      // calls the note names as undone (their effects went with the node), as a model would.
      const gone = new Set([...json.slice(m.index!).matchAll(/tool calls ([\w, ]+?) changed is gone/g)].flatMap((g) => g[1]!.split(', ')))
      const mine = req.toolResults.filter((r) => r.toolCallId.startsWith(prefix))
      const since = mine.filter((r) => !gone.has(r.toolCallId))
      asks.push({ at: Date.now(), key: `${s}/${t}/${mine.map((r) => r.toolCallId).join(',')}/${[...gone].join(',')}` })
      const next = (id: string, command: string): ScriptStep => ({ toolCalls: [{ id: `${prefix}${id}_${mine.length}`, name: 'bash', args: { command } }] })
      const last = since.at(-1)
      const cut = last !== undefined && CUT.test(last.content)
      if (t === 'check') {
        if (!last || cut) return next('cat', 'cat /workspace/log.txt')
        logs.set(Number(s), last.content)
        return { text: 'checked' }
      }
      const line = (which: string) => `echo "s${s} ${t} ${which}" >> /workspace/log.txt`
      // A command cut by a node's loss counts as not run (its effect, if any, went with the node).
      const ran = (which: string) => since.some((r) => new RegExp(`_${which}_\\d+$`).test(r.toolCallId) && !CUT.test(r.content))
      if (!ran('a')) return next('a', line('a'))
      if (!ran('b')) return next('b', line('b'))
      // Named by the calls it rests on: a turn told after its answer that those calls' work is gone
      // answers again, differently; the same answer recorded twice is a duplicate.
      return { text: `done ${t} after ${since.map((r) => r.toolCallId).join(',')}` }
    }

    /** A call to whichever live node answers, again and again until one gives a final answer. */
    let rr = 0
    async function call(method: string, url: string, body?: unknown, headers: Record<string, string> = {}, within = 120_000): Promise<{ status: number; body: any; text: string }> {
      const until = Date.now() + within
      let last = ''
      for (;;) {
        const live = c.live()
        const i = live[rr++ % Math.max(1, live.length)]
        if (i !== undefined) {
          try {
            const res = await request(c, i, method, url, body, headers)
            // A node that lost or is joining refuses (503), one the owner is lost to cannot forward (502/504).
            if (res.status < 500) return res
            last = `node ${i}: ${res.status} ${res.text}`
          } catch (err) {
            last = `node ${i}: ${(err as Error).message}`
          }
        }
        if (Date.now() > until) throw new Error(`${method} ${url} found no node to answer within ${within} ms; last: ${last}`)
        await sleep(150)
      }
    }

    /** The turns of a session, oldest first. */
    const turnsOf = async (sessionId: string): Promise<{ id: string; status: string }[]> => {
      const res = await call('GET', `/v1/sessions/${sessionId}/turns?order=asc&limit=100`)
      assert.equal(res.status, 200, res.text)
      return res.body.data
    }

    /**
     * Sends the session's `index`-th message with an idempotency key. A key whose first request died
     * with its node stays in flight (409) for minutes; the session then holds the turn or not, and
     * only this loop sends to it, so its count tells.
     */
    async function sendOnce(sessionId: string, index: number, text: string): Promise<string> {
      const key = `${sessionId}-${index}`
      for (let tries = 0; ; tries++) {
        const res = await call('POST', `/v1/sessions/${sessionId}/messages`, { text }, { 'idempotency-key': key })
        if (res.status === 202) return res.body.id
        assert.equal(res.status, 409, `sending "${text}": ${res.text}`)
        const turns = await turnsOf(sessionId)
        if (turns.length > index) {
          say(`"${text}": its request died with a node after the turn was made (key in flight); found it by count`)
          return turns[index]!.id
        }
        if (tries > 200) assert.fail(`"${text}" stays refused: ${res.text}`)
        await sleep(300)
      }
    }

    async function settledTurn(sessionId: string, turnId: string): Promise<{ status: string; error: unknown }> {
      return waitFor(`turn ${turnId} of ${sessionId} settles`, async () => {
        const res = await call('GET', `/v1/sessions/${sessionId}/turns/${turnId}`)
        assert.equal(res.status, 200, res.text)
        if (res.body.status === 'working' || res.body.artifacts === 'pending') {
          await sleep(100)
          return null
        }
        return res.body as { status: string; error: unknown }
      }, 180_000)
    }

    const sessions: string[] = []
    for (let k = 0; k < SESSIONS; k++) {
      const res = await call('POST', '/v1/sessions', {}, { 'idempotency-key': `chaos-${SEED}-${k}` })
      assert.equal(res.status, 201, res.text)
      sessions.push(res.body.id)
    }

    const sent: SentTurn[] = []
    const start = Date.now()
    const end = start + SECONDS * 1000
    let stopped = false

    // Each session sends its next turn as soon as the one before settles, until the time is up.
    const loops = sessions.map(async (sessionId, k) => {
      for (let n = 0; Date.now() < end; n++) {
        const turnId = await sendOnce(sessionId, n, `chaos s${k} t${n}`)
        const done = await settledTurn(sessionId, turnId)
        sent.push({ session: k, index: n, sessionId, turnId, status: done.status, error: done.error })
      }
    })

    /** The identity node `i` serves under now (asked until it answers: a node just restarted may be slow to). */
    const nodeId = (i: number): Promise<string> => waitFor(`node ${i} says who it is`, async () => (await request(c, i, 'GET', '/v1/health').catch(() => null))?.body?.node?.id as string | undefined, 60_000)
    // The chaos: one node at a time, kills and pauses in turn, the first kind and every wait from the seed.
    const monkey = (async () => {
      let kind: Chaos['kind'] = rand() < 0.5 ? 'kill' : 'pause'
      for (;;) {
        const wait = 15_000 + Math.floor(rand() * 15_000)
        if (Date.now() + wait > end) return
        await sleep(wait)
        const live = c.live()
        const i = live[Math.floor(rand() * live.length)]!
        // Each event's time is taken as its signal goes: what a node did before it is not cut by it.
        if (kind === 'kill') {
          const pid = c.nodes[i]!.service.pid!
          // With everything it started: its spawner, the sandboxes and their commands.
          const tree = descendants(pid)
          chaos.push({ at: Date.now(), kind, node: i })
          signal([pid, ...tree], 'SIGSTOP')
          signal(tree, 'SIGKILL')
          await c.kill(i, 'SIGKILL')
          say(`killed node ${i} (${tree.length} processes below it)`)
          await c.start(i)
          say(`restarted node ${i}`)
        } else {
          const id = await nodeId(i)
          const pid = c.nodes[i]!.service.pid!
          chaos.push({ at: Date.now(), kind, node: i })
          process.kill(pid, 'SIGSTOP')
          say(`paused node ${i}`)
          try {
            await waitFor(`node ${i} is declared dead while paused`, async () => (await c.query<{ stopped_at: unknown }>('SELECT stopped_at FROM {schema}.nodes WHERE id = $1', [id]))[0]?.stopped_at != null, 60_000)
            await sleep(Math.floor(rand() * 2000))
          } finally {
            process.kill(pid, 'SIGCONT')
            say(`woke node ${i}`)
          }
        }
        kind = kind === 'kill' ? 'pause' : 'kill'
        if (stopped) return
      }
    })()

    try {
      await Promise.all([...loops, monkey])
    } finally {
      stopped = true
    }
    await monkey
    for (const i of c.nodes.map((n) => n.index)) if (!c.live().includes(i)) await c.start(i)
    process.stdout.write(`# chaos: ${sent.length} turns, ${chaos.map((e) => `${e.kind} node ${e.node} at ${((e.at - start) / 1000).toFixed(2)} s`).join(', ')}\n`)

    // What each workspace holds at the end, read by a turn of its own.
    await Promise.all(sessions.map(async (sessionId, k) => {
      const turnId = await sendOnce(sessionId, sent.filter((t) => t.session === k).length, `chaos s${k} check`)
      const done = await settledTurn(sessionId, turnId)
      assert.equal(done.status, 'completed', JSON.stringify(done))
      assert.ok(logs.has(k), `the check turn of s${k} read its log`)
    }))

    async function itemsOf(sessionId: string): Promise<Item[]> {
      const out: Item[] = []
      let cursor = ''
      for (;;) {
        const res = await call('GET', `/v1/sessions/${sessionId}/items?order=asc&limit=100${cursor ? `&after=${cursor}` : ''}`)
        assert.equal(res.status, 200, res.text)
        out.push(...(res.body.data as Item[]))
        if (!res.body.has_more) return out
        cursor = res.body.last_id
      }
    }

    const problems: string[] = []
    // Every turn settles and completes.
    for (const t of sent) if (t.status !== 'completed') problems.push(`turn ${t.turnId} (s${t.session} t${t.index}) ended ${t.status}: ${JSON.stringify(t.error)}`)

    // No model step asked twice, except as many times as a kill or pause fell between the asks.
    const byKey = new Map<string, number[]>()
    for (const a of asks) byKey.set(a.key, [...(byKey.get(a.key) ?? []), a.at])
    for (const [key, times] of byKey) {
      if (times.length < 2) continue
      // An ask is stamped as the fake server reads it, a little after the node sent it: one read just
      // after a pause or kill was sent before it (a stopped node sends nothing), and may be cut by it.
      const cuts = chaos.filter((e) => e.at > times[0]! - ASK_LAG_MS && e.at < times.at(-1)!).length
      if (times.length - 1 > cuts) problems.push(`model step ${key} of ${sessions[Number(key.split('/')[0])]} asked ${times.length} times (at ${times.map((t) => ((t - start) / 1000).toFixed(2)).join(', ')} s) with ${cuts} kills or pauses between`)
    }

    for (const [k, sessionId] of sessions.entries()) {
      const items = await itemsOf(sessionId)
      const count = (event: string, field: string) => {
        const seen = new Map<string, number>()
        for (const i of items) if (i.detail.event === event) seen.set(String(i.detail[field]), (seen.get(String(i.detail[field])) ?? 0) + 1)
        return seen
      }
      const ids = new Set(items.map((i) => i.id))
      if (ids.size !== items.length) problems.push(`s${k}: an item id appears twice`)
      // No event twice: a call is made and answered once, a turn starts and ends once.
      for (const [event, field] of [['agent.tool_call', 'toolCallId'], ['agent.tool_result', 'toolCallId'], ['turn.started', 'turnId'], ['turn.ended', 'turnId']] as const) {
        for (const [id, n] of count(event, field)) if (n > 1) problems.push(`s${k}: ${event} for ${id} recorded ${n} times\n${render(items.filter((i) => JSON.stringify(i.detail).includes(id)))}`)
      }
      const messages = new Map<string, number>()
      for (const i of items) if (i.detail.event === 'agent.message' && i.turn_id) messages.set(`${i.turn_id} ${i.detail.text}`, (messages.get(`${i.turn_id} ${i.detail.text}`) ?? 0) + 1)
      for (const [answer, n] of messages) if (n > 1) problems.push(`s${k}: turn ${answer} recorded ${n} times`)

      // Every completed turn's two lines, once each: nothing run twice, nothing lost.
      const expected = sent.filter((t) => t.session === k).sort((a, b) => a.index - b.index).flatMap((t) => [`s${k} t${t.index} a`, `s${k} t${t.index} b`])
      // The bash tool's result ends with the command's exit status.
      const actual = logs.get(k)!.split('\n').filter((l) => l.trim() !== '' && !/^\[exit code: \d+\]$/.test(l))
      // Turns in order; within a turn, a command run again after a restore may follow the other.
      const order = (lines: string[]) => lines.map((l) => l.split(' ')[1]).filter((t, i, all) => i === 0 || all[i - 1] !== t)
      if (JSON.stringify(order(actual)) !== JSON.stringify(order(expected)) || JSON.stringify([...actual].sort()) !== JSON.stringify([...expected].sort())) {
        const missing = expected.filter((l) => !actual.includes(l))
        const twice = actual.filter((l, i) => actual.indexOf(l) !== i)
        const extra = actual.filter((l) => !expected.includes(l))
        const turns = new Set([...missing, ...twice, ...extra].map((l) => sent.find((t) => t.session === k && l.startsWith(`s${k} t${t.index} `))?.turnId))
        problems.push(`s${k} (${sessionId}): the workspace's log differs from its completed turns: missing ${JSON.stringify(missing)}, twice ${JSON.stringify(twice)}, not of a completed turn ${JSON.stringify(extra)}\n${actual.join(' | ')}\n${render(items.filter((i) => turns.has(i.turn_id ?? '') || (i.turn_id === null && i.detail.event !== 'file.changed')))}`)
      }
    }
    if (problems.length > 0) notes.push(keepLogs())
    assert.deepEqual(problems, [], `seed ${SEED}\n${notes.join('\n')}`)
    assert.ok(sent.length >= SESSIONS, `the sessions made progress: ${sent.length} turns`)
  }
})
