// Deployments side by side on one host: each one's start-up clean-up removes what carries its own
// prefix and nothing of another's, the default deployment's included.
import { after, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { cgroupPrefix } from '../src/sandbox/local/create-local.ts'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'
import { probeHost } from '../src/sandbox/local/host-check.ts'
import { removeCgroupParent } from './cgroup-parent.ts'
import type { LocalSandbox } from '../src/sandbox/local/local-sandbox.ts'
import { parkExec } from '../src/sandbox/local/parked.ts'

const skip = process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap']).status !== 0 ? 'needs bubblewrap' : false
if (skip) console.log(`# skipped: ${skip}`)

const run = randomBytes(3).toString('hex')
// A cgroup parent of this file's own: the default deployment's clean-up runs in it for real.
const cgroupParent = `warren-prefixes-${run}`
const uidBase = 300_000 + (randomBytes(2).readUInt16BE() % 600) * 1000 + 700
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-prefixes-'))
fs.chmodSync(dataDir, 0o700)
const providers: LocalSandboxProvider[] = []
after(async () => {
  await Promise.allSettled(providers.map((p) => p.close()))
  fs.rmSync(dataDir, { recursive: true, force: true })
  removeCgroupParent(cgroupParent)
})

const deployment = (prefix: string, i: number) => {
  const p = new LocalSandboxProvider({ cgroupParent, workspaceRoot: dataDir, prefix: cgroupPrefix(prefix), uidBase: uidBase + i * 10, uidCount: 10, warm: 0 })
  providers.push(p)
  return p
}

it('a deployment starting up leaves the sandboxes of every other one alone, the default deployment too; one whose groups were removed is destroyed and says so', { skip }, async () => {
  const spec = (id: string) => ({
    id,
    workspaceMount: '/workspace',
    env: {},
    network: { allow: [] },
    limits: { memoryBytes: 256 * 1024 * 1024, pids: 64, cpus: 1 },
  })
  const a = (await deployment(`p${run.slice(0, 4)}`, 0).create(spec('ses_a'))) as LocalSandbox
  // The default deployment starts beside it, then holds a sandbox of its own; another one starts.
  const dflt = deployment('wr', 1)
  await dflt.cleanupOrphans()
  const b = (await dflt.create(spec('ses_b'))) as LocalSandbox
  await deployment(`q${run.slice(0, 4)}`, 2).cleanupOrphans()
  for (const sb of [a, b]) {
    for (const dir of sb.cgroup.dirs) assert.ok(fs.existsSync(dir), `${dir} was removed`)
    assert.equal((await sb.exec({ command: 'echo alive' })).stdout.toString(), 'alive\n')
  }
  // Control: the default deployment starting again finds its own earlier sandbox an orphan, and only that.
  await deployment('wr', 3).cleanupOrphans()
  assert.ok(b.cgroup.dirs.every((d) => !fs.existsSync(d)), 'the default deployment\'s own orphan stayed')
  // That sandbox is over, and says so: the next create for its session starts afresh.
  await assert.rejects(b.exec({ command: 'true' }), /cgroup .* was removed by another process.*the sandbox is destroyed/)
  assert.equal(b.state, 'destroyed')
  assert.equal(dflt.get('ses_b'), null)
  const again = await dflt.create(spec('ses_b'))
  assert.equal((await again.exec({ command: 'echo again' })).stdout.toString(), 'again\n')
  assert.equal((await a.exec({ command: 'echo still' })).stdout.toString(), 'still\n')
})

it('a shell that cannot join its cgroups says which file and why', { skip }, async () => {
  const missing = path.join(dataDir, 'no-such-group', 'cgroup.procs')
  await assert.rejects(parkExec(probeHost({ probeUid: uidBase }).tools!, [missing]).ready, (e: Error) => e.message.startsWith('parked shell exited (125) before it was ready: ') && e.message.includes(missing))
})
