// bench/outputs: what publishing a turn's files costs.
//   Publication speed in MiB/s: the files of a turn published through the service's own path
//   (publishTurn: link-refusing open, sha256, content-addressed copy, records and events in one
//   transaction) beside a plain copy of the same files with fs.copyFile in the same run.
// Usage: node_modules/.bin/node bench/outputs.ts [--mib N] [--files N]
// (The preview proxy half of this benchmark comes with previews.)
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { openStore } from '../src/db/database.ts'
import { memoryEventBus } from '../src/events/event-bus.ts'
import { withEvents } from '../src/events/record-event.ts'
import { localBlobStore } from '../src/artifacts/blob-store.ts'
import { publishTurn } from '../src/artifacts/publish-turn.ts'
import type { WorkspaceManager } from '../src/workspaces/workspace-manager.ts'

const arg = (name: string, def: number) => Number(process.argv[process.argv.indexOf(name) + 1]) || def
const MIB_TOTAL = arg('--mib', 256)
const FILES = arg('--files', 16)
const ROUNDS = 3
const MIB = 1024 * 1024

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-outputs-'))
const store = await openStore({ dataDir })
const bus = memoryEventBus()
const workspaceRoot = path.join(dataDir, 'workspaces')
// Only the folder of a session's files is asked of the workspace manager when publishing.
const workspaces = { workspaceDir: (id: string) => path.join(workspaceRoot, id) } as WorkspaceManager

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const mibps = (ms: number) => (MIB_TOTAL / ms) * 1000

const times = { publish: [] as number[], copy: [] as number[], hash: [] as number[] }
try {
  for (let round = 0; round < ROUNDS; round++) {
    // Fresh random files each round, so content addressing never finds them already stored.
    const sessionId = `ses_bench${round}`
    const dir = path.join(workspaceRoot, sessionId)
    fs.mkdirSync(path.join(dir, 'out'), { recursive: true })
    const turnId = `trn_bench${round}`
    const size = Math.floor((MIB_TOTAL * MIB) / FILES)
    await withEvents(store, bus, async (trx, record) => {
      await trx
        .insertInto('turns')
        .values({ id: turnId, session_id: sessionId, org_id: 'org_bench', ordinal: 1, status: 'completed', text: '', created_at: Date.now(), started_at: null, completed_at: Date.now(), error: null, artifacts: 'pending', artifacts_skipped: '[]', cancel_requested: 0, steps: 0, running_call: null, queued_position: null })
        .execute()
      await trx.insertInto('sessions').values(sessionRow(sessionId)).execute()
      for (let i = 0; i < FILES; i++) {
        fs.writeFileSync(path.join(dir, 'out', `f${i}.bin`), randomBytes(size))
        await record({ orgId: 'org_bench', sessionId, turnId, type: 'file.changed', payload: { path: `out/f${i}.bin`, kind: 'created' } })
      }
    })
    const blobs = localBlobStore(path.join(dataDir, `blobs${round}`))
    let t = performance.now()
    await publishTurn({ store, bus, workspaces, blobs }, { id: turnId, session_id: sessionId, org_id: 'org_bench' })
    times.publish.push(performance.now() - t)
    const state = await store.db.selectFrom('turns').select('artifacts').where('id', '=', turnId).executeTakeFirstOrThrow()
    if (state.artifacts !== 'ready') throw new Error(`publication ended ${state.artifacts}`)

    const plain = path.join(dataDir, `plain${round}`)
    fs.mkdirSync(plain)
    t = performance.now()
    for (let i = 0; i < FILES; i++) await fs.promises.copyFile(path.join(dir, 'out', `f${i}.bin`), path.join(plain, `f${i}.bin`))
    times.copy.push(performance.now() - t)

    // What any publication must do at least: read every byte once through sha256.
    t = performance.now()
    for (let i = 0; i < FILES; i++) {
      const h = createHash('sha256')
      for await (const chunk of fs.createReadStream(path.join(dir, 'out', `f${i}.bin`), { highWaterMark: MIB })) h.update(chunk)
      h.digest()
    }
    times.hash.push(performance.now() - t)
  }
  const p = median(times.publish)
  const c = median(times.copy)
  console.log(`bench/outputs: publication of ${FILES} files, ${MIB_TOTAL} MiB in all, median of ${ROUNDS} rounds`)
  console.log(`publishTurn (open, sha256, blob copy, records)   ${p.toFixed(1)} ms  ${mibps(p).toFixed(0)} MiB/s`)
  console.log(`plain fs.copyFile of the same files              ${c.toFixed(1)} ms  ${mibps(c).toFixed(0)} MiB/s`)
  const h = median(times.hash)
  console.log(`sha256 of the same files, nothing written         ${h.toFixed(1)} ms  ${mibps(h).toFixed(0)} MiB/s`)
  console.log(`publication / plain copy (speed)                 ${(c / p).toFixed(2)}`)
  console.log(`publication / sha256 alone (speed)               ${(h / p).toFixed(2)}`)
} finally {
  await store.close()
  fs.rmSync(dataDir, { recursive: true, force: true })
}

/** A session row as far as publication reads it (it exists and is not deleted). */
function sessionRow(id: string) {
  const now = Date.now()
  return { id, org_id: 'org_bench', status: 'idle', created_at: now, updated_at: now, title: '', source: null, created_by_token: 'tok_bench', metadata: '{}', agent: '{}', model_credential_id: null, environment: '{}', preview: '{}', input: null, deleted_at: null }
}
