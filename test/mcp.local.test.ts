// Local MCP servers through HTTP: a real stdio server (the MCP SDK's, a test fixture) declared
// with `command` runs inside the session's sandbox as its unprivileged user, never on the host;
// its tools are offered and called like any other, and one that cannot start is skipped or fails
// the turn as its entry says.
import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { forEachDialect, useWarren } from './harness.ts'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { NO_RATE_LIMITS, client, details, newOrg } from './turns.helpers.ts'
import { waitFor } from './fixtures.ts'
import { hostWorkspace } from './host-workspace.ts'

const TOKEN = 'local-env-secret-3b7e'
const ROOT = path.join(import.meta.dirname, '..')

/** Every package the SDK needs at run time, found from its package.json files. */
function packageClosure(start: string[]): string[] {
  const seen = new Set<string>()
  const visit = (name: string) => {
    if (seen.has(name)) return
    const manifest = path.join(ROOT, 'node_modules', name, 'package.json')
    if (!fs.existsSync(manifest)) return
    seen.add(name)
    for (const dep of Object.keys((JSON.parse(fs.readFileSync(manifest, 'utf8')) as { dependencies?: Record<string, string> }).dependencies ?? {})) visit(dep)
  }
  start.forEach(visit)
  return [...seen]
}

/** Puts the fixture server and the packages it imports into the session's workspace, readable by its user. */
function installFixture(workspaceDir: string): void {
  const dest = path.join(workspaceDir, 'mcp-fixture')
  for (const name of packageClosure(['@modelcontextprotocol/sdk', 'zod'])) fs.cpSync(path.join(ROOT, 'node_modules', name), path.join(dest, 'node_modules', name), { recursive: true })
  fs.copyFileSync(path.join(ROOT, 'test/fixtures/mcp-stdio-server.mjs'), path.join(dest, 'server.mjs'))
  fs.writeFileSync(path.join(dest, 'package.json'), '{"type":"module"}')
}

forEachDialect('local MCP servers in the sandbox', (dialect) => {
  const w = useWarren(dialect, { env: NO_RATE_LIMITS })
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })
  after(() => fake.close())

  async function session(tools: unknown[], agent: Record<string, unknown> = {}) {
    const c = client(w(), await newOrg(w()))
    await c.connect(fake, 'openai')
    const sid = await c.session({ tools, agent })
    await waitFor('the workspace is up', async () => (await c.getSession(sid)).environment.state === 'running', 30_000)
    installFixture(hostWorkspace(w(), sid))
    return { c, sid }
  }
  const local = (extra: Record<string, unknown> = {}) => ({
    type: 'mcp',
    name: 'local',
    command: 'node',
    args: ['mcp-fixture/server.mjs', createHash('sha256').update(TOKEN).digest('hex')],
    env: { FIXTURE_TOKEN: TOKEN },
    ...extra,
  })

  it('runs in the sandbox as its user, with its secret environment; its tools are called like any other', async () => {
    const { c, sid } = await session([local()])
    const before = fake.modelRequests.length
    fake.script({ toolCalls: [{ id: 'call_where', name: 'mcp__local__where', args: {} }] }, { toolCalls: [{ id: 'call_touch', name: 'mcp__local__touch', args: { name: 'from-mcp.txt' } }] }, { text: 'Done.' })
    const turn = await c.accept(sid, 'where are you?')
    assert.equal((await c.settled(sid, turn.id, 60_000)).status, 'completed')
    const requests = fake.modelRequests.slice(before)
    assert.ok(requests[0]!.tools.includes('mcp__local__where') && requests[0]!.tools.includes('mcp__local__touch'))
    const where = JSON.parse(requests[1]!.toolResults[0]!.content) as { uid: number; cwd: string; hostname: string; token_ok: boolean }
    assert.notEqual(where.uid, 0, 'never root')
    assert.notEqual(where.uid, process.getuid!(), 'not the service’s user')
    assert.equal(where.cwd, '/workspace')
    assert.equal(where.hostname, 'workspace')
    assert.notEqual(where.hostname, os.hostname())
    assert.equal(where.token_ok, true, 'the secret environment value reached the server')
    // It wrote in the workspace, as the sandbox's user.
    const written = path.join(hostWorkspace(w(), sid), 'from-mcp.txt')
    assert.equal(fs.readFileSync(written, 'utf8'), 'written by the MCP server\n')
    assert.equal(fs.statSync(written).uid, where.uid)
    const items = await c.items(sid)
    assert.deepEqual(details(items, 'agent.tool_call').map((d) => d.toolName), ['mcp__local__where', 'mcp__local__touch'])
    assert.ok(!JSON.stringify([items, await c.getSession(sid)]).includes(TOKEN), 'the secret is never shown')
  })

  it('a server that cannot start: skipped with its own words when not required; fails the turn when required', async () => {
    const broken = local({ name: 'broken', args: ['mcp-fixture/missing.mjs'] })
    const skipped = await session([broken])
    fake.script({ text: 'Without it.' })
    const t1 = await skipped.c.accept(skipped.sid, 'go')
    assert.equal((await skipped.c.settled(skipped.sid, t1.id, 60_000)).status, 'completed')
    const reported = details(await skipped.c.items(skipped.sid), 'mcp.unavailable')
    assert.equal(reported.length, 1)
    assert.equal(reported[0]!.server, 'broken')
    assert.match(String(reported[0]!.reason), /Cannot find module|missing\.mjs/)

    const failing = await session([{ ...broken, required: true }])
    const t2 = await failing.c.accept(failing.sid, 'go')
    const settled = await failing.c.settled(failing.sid, t2.id, 60_000)
    assert.equal(settled.status, 'failed')
    assert.match(settled.error!.message, /required MCP server "broken" would not connect/)
  })
})
