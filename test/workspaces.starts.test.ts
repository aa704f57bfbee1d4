import { after, before, it } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import { forEachDialect, useWarren } from './harness.ts'
import { connectModel, waitFor } from './fixtures.ts'
import { createSession } from '../src/sessions/create-session.ts'
import { createLocalProvider } from '../src/sandbox/local/create-local.ts'
import type { Sandbox, SandboxProvider, SandboxSpec } from '../src/sandbox/sandbox.ts'
import { randomText } from '../src/shared/ids.ts'
import { getWorkspace } from '../src/workspaces/workspaces.store.ts'
import { workspaceManager, type WorkspaceManager } from '../src/workspaces/workspace-manager.ts'
import { SCOPES } from '../src/tokens/scopes.ts'

/**
 * The real local provider, with every create held at a gate the test opens one at a time: how
 * many bring-ups run at once is then counted exactly, whatever the machine's speed.
 */
function gatedProvider(inner: SandboxProvider) {
  /** Creates held at the gate, by sandbox id, in the order they arrived. */
  const waiting: { id: string; open: () => void }[] = []
  const gate = { open: false }
  const seen = { active: 0, most: 0, entered: 0, done: 0 }
  const provider: SandboxProvider = {
    name: inner.name,
    claim: inner.claim,
    get: (id) => inner.get(id),
    cleanupOrphans: () => inner.cleanupOrphans(),
    workspace: (id) => inner.workspace(id),
    deleteWorkspace: (id) => inner.deleteWorkspace(id),
    packWorkspace: (id) => inner.packWorkspace(id),
    unpackWorkspace: (id, archive) => inner.unpackWorkspace(id, archive),
    report: () => inner.report(),
    close: () => inner.close(),
    async create(spec: SandboxSpec): Promise<Sandbox> {
      seen.active++
      seen.entered++
      seen.most = Math.max(seen.most, seen.active)
      try {
        if (!gate.open) await new Promise<void>((open) => waiting.push({ id: spec.id, open }))
        return await inner.create(spec)
      } finally {
        seen.active--
        seen.done++
      }
    },
  }
  /** Lets every create through from now on (so that a failed run can still close). */
  const openAll = () => {
    gate.open = true
    for (const { open } of waiting.splice(0)) open()
  }
  return { provider, seen, waiting, openAll }
}

forEachDialect('workspace bring-up', (dialect) => {
  const STARTS = 2
  const w = useWarren(dialect, { env: { WARREN_MAX_SESSIONS_PER_ORG: '100', WARREN_SANDBOX_STARTS: String(STARTS) } })
  const opened: { manager: WorkspaceManager; gate: ReturnType<typeof gatedProvider> }[] = []
  let caller: { token: string; id: string; orgId: string }
  before(async () => {
    caller = await w().mint()
    await connectModel(w(), undefined, caller.token)
  })
  after(async () => {
    for (const { gate, manager } of opened) {
      gate.openAll()
      await manager.close()
    }
  })

  /** A manager of its own over the harness's store, its creates gated, and `count` sessions it alone knows of. */
  async function gatedManager(count: number) {
    const inner = await createLocalProvider({ workspaceRoot: path.join(w().dataDir, 'gated-workspaces'), prefix: `q${randomText(4)}`, uidBase: 900_000 + Math.floor(Math.random() * 90) * 1000, uidCount: 1000 })
    const gate = gatedProvider(inner)
    const manager = workspaceManager({ store: w().store, bus: w().bus, config: w().config, box: w().box, provider: gate.provider })
    opened.push({ manager, gate })
    const auth = { tokenId: caller.id, orgId: caller.orgId, scopes: [...SCOPES] }
    // Written straight to the store: the harness's own manager never hears of these sessions.
    const ids: string[] = []
    for (let i = 0; i < count; i++) ids.push((await createSession(w(), auth, { title: `s${i}` }, 'api')).id)
    return { manager, gate, ids }
  }

  it('runs at most WARREN_SANDBOX_STARTS bring-ups at once, and every workspace still comes up', async () => {
    assert.equal(w().config.sandboxStarts, STARTS)
    const SESSIONS = 6
    const { manager, gate, ids } = await gatedManager(SESSIONS)
    for (const id of ids) manager.start(id)
    for (let released = 0; released < SESSIONS; released++) {
      const expected = Math.min(STARTS, SESSIONS - released)
      // A bound that leaks lets more in while these wait at the gate: `most` (or the count) shows it.
      await waitFor(`${expected} bring-ups at the gate`, async () => gate.waiting.length === expected)
      assert.ok(gate.seen.most <= STARTS, `${gate.seen.most} bring-ups ran at once; the bound is ${STARTS}`)
      gate.waiting.shift()!.open()
      await waitFor('the released bring-up to finish', async () => gate.seen.done === released + 1)
    }

    for (const id of ids) await waitFor(`${id} running`, async () => (await getWorkspace(w().store.db, id))?.env.state === 'running')
    assert.equal(gate.seen.entered, SESSIONS)
    assert.equal(gate.seen.most, STARTS, 'bring-ups run side by side up to the bound')
  })

  it('a workspace destroyed while its bring-up waits its turn is never brought up, and the destroy does not wait for the queue', async () => {
    const { manager, gate, ids } = await gatedManager(STARTS + 1)
    for (const id of ids) manager.start(id)
    await waitFor(`${STARTS} bring-ups at the gate`, async () => gate.waiting.length === STARTS)
    // Whichever reached the provider first holds a place; the other one waits its turn.
    const atGate = gate.waiting.map((g) => g.id)
    const queued = ids.find((id) => !atGate.includes(id))!
    // The gate stays shut: a destroy that joined the queue would never resolve.
    await manager.destroy(queued)
    gate.openAll()
    for (const id of atGate) await waitFor(`${id} running`, async () => (await getWorkspace(w().store.db, id))?.env.state === 'running')
    assert.equal(gate.seen.entered, STARTS, 'the destroyed workspace never reached the provider')
  })
})
