// Sandboxes under load: many creates, execs and spawns at once while the CPU is busy and another
// deployment starts up on the same host, as on a CI machine running other work beside the suite.
import { after, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Sandbox } from '../src/sandbox/sandbox.ts'
import { cgroupPrefix } from '../src/sandbox/local/create-local.ts'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'
import { removeCgroupParent } from './cgroup-parent.ts'

const skip = process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap']).status !== 0 ? 'needs bubblewrap' : false
if (skip) console.log(`# skipped: ${skip}`)

const SANDBOXES = 6
const ROUNDS = 3
const EXECS_PER_ROUND = 3
/** Busy loops: with the suite's own work they keep both cores of a CI machine saturated. */
const BURNERS = 2

const run = randomBytes(3).toString('hex')
// A cgroup parent of this file's own: the other deployment's start-up clean-up runs in it for real.
const cgroupParent = `warren-stress-${run}`
const uidBase = 300_000 + (randomBytes(2).readUInt16BE() % 600) * 1000 + 500
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-stress-'))
fs.chmodSync(dataDir, 0o700)
after(() => {
  fs.rmSync(dataDir, { recursive: true, force: true })
  removeCgroupParent(cgroupParent)
})

it('creates, execs and spawns at once under CPU load beside another deployment\'s start-up: zero failures', { skip }, async () => {
  // Each burner is one process that ends by itself after 5 minutes: SIGKILL below ends it at once,
  // and a test process killed before that cannot leave it spinning for good.
  const burners = Array.from({ length: BURNERS }, () => spawn(process.execPath, ['-e', 'const end = Date.now() + 300000; while (Date.now() < end);'], { stdio: 'ignore' }))
  // Deployments as create-local names them: this one with a prefix, the other one the default.
  const provider = new LocalSandboxProvider({ cgroupParent, workspaceRoot: dataDir, prefix: cgroupPrefix(`s${run.slice(0, 4)}`), uidBase, uidCount: 100 })
  const other = () => new LocalSandboxProvider({ cgroupParent, workspaceRoot: dataDir, prefix: cgroupPrefix('wr'), uidBase: uidBase + 200, uidCount: 10, warm: 0 })
  const failures: string[] = []
  let done = 0
  const check = (what: string, p: Promise<void>) => p.then(() => void done++, (e: Error) => void failures.push(`${what}: ${e.message}`))
  try {
    await provider.cleanupOrphans()
    const sandboxes = await Promise.all(Array.from({ length: SANDBOXES }, (_, i) =>
      provider.create({
        id: `stress-${i}`,
        workspaceMount: '/workspace',
        env: {},
        network: { allow: [] },
        limits: { memoryBytes: 256 * 1024 * 1024, pids: 64, cpus: 1 },
      }).catch((e: Error) => void failures.push(`create ${i}: ${e.message}`)),
    ))
    const work = (sb: Sandbox, i: number) => async () => {
      for (let r = 0; r < ROUNDS; r++) {
        const tag = `${i}-${r}`
        await Promise.all([
          ...Array.from({ length: EXECS_PER_ROUND }, (_, k) => check(`exec ${tag}-${k}`, sb.exec({ command: `echo out-${tag}-${k}; echo err-${k} >&2` }).then((res) => {
            assert.deepEqual([res.exitCode, res.stdout.toString(), res.stderr.toString()], [0, `out-${tag}-${k}\n`, `err-${k}\n`])
          }))),
          check(`spawn ${tag}`, sb.spawn({ command: 'read line; echo "got $line"' }).then(async (p) => {
            let out = ''
            p.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
            const ended = new Promise((r) => p.stdout.once('end', r))
            p.stdin.end(`line-${tag}\n`)
            assert.equal(await p.exited, 0)
            await ended
            assert.equal(out, `got line-${tag}\n`)
          })),
        ])
      }
    }
    // Another deployment starting on the same host meanwhile, twice: its clean-up must leave ours alone.
    const neighbour = (async () => {
      for (let n = 0; n < 2; n++) {
        const o = other()
        await o.cleanupOrphans()
        await o.close()
      }
    })()
    await Promise.all([...sandboxes.map((sb, i) => (sb ? work(sb, i)() : null)), neighbour])
    await Promise.all(sandboxes.map((sb) => sb?.destroy()))
  } finally {
    for (const b of burners) b.kill('SIGKILL')
    await provider.close()
  }
  assert.deepEqual(failures, [])
  assert.equal(done, SANDBOXES * ROUNDS * (EXECS_PER_ROUND + 1))
})
