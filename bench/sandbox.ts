// bench/sandbox: the local sandbox provider against bare bubblewrap spawns measured in the same run.
// Usage: node_modules/.bin/node bench/sandbox.ts [--rounds N]
//
// Baselines, both spawned from Node like the provider spawns its processes:
//  - bare bwrap: `bwrap --ro-bind /usr /usr --symlink usr/bin /bin … true` as root, no namespaces;
//  - bare sandbox: one bwrap with the provider's isolation (setpriv to an unprivileged uid, user/pid/
//    ipc/uts/net namespaces, cap-drop, /proc, /dev, tmpfs /tmp) running `true`: what a sandbox costs
//    before any workspace, cgroup or long-lived init.
// Targets: create-to-first-command p50 ≤ 3× the bare sandbox spawn; resume p50 < 50 ms.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { systemRoots } from '../src/sandbox/local/bubblewrap.ts'
import { createLocalProvider } from '../src/sandbox/local/create-local.ts'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'
import type { SandboxSpec } from '../src/sandbox/sandbox.ts'

const rounds = Number(process.argv[process.argv.indexOf('--rounds') + 1]) || 40
const UID_BASE = 390_000

const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const ms = (x: number) => `${x.toFixed(2)} ms`

function spawnWait(argv: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: 'ignore', env: { PATH: '/usr/bin:/bin' } })
    child.on('error', reject)
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${argv.join(' ')} exited ${code}`))))
  })
}

async function time(n: number, f: (i: number) => Promise<unknown>, before?: (i: number) => Promise<unknown>): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) {
    await before?.(i)
    const t = performance.now()
    await f(i)
    out.push(performance.now() - t)
  }
  return out
}

const bareBwrap = ['/usr/bin/bwrap', ...systemRoots(), '--', '/usr/bin/true']
const bareSandbox = [
  '/usr/bin/setpriv', '--reuid', String(UID_BASE + 999), '--regid', String(UID_BASE + 999), '--clear-groups', '--no-new-privs', '--',
  '/usr/bin/bwrap', '--unshare-user', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-net',
  '--cap-drop', 'ALL', '--new-session', '--die-with-parent', ...systemRoots(),
  '--tmpfs', '/tmp', '--proc', '/proc', '--dev', '/dev', '--', '/usr/bin/true',
]

// Two data folders: one the sandbox uids may traverse (0711, like a default `.warren`), and one
// they may not (0700), whose workspaces are staged through a private mount namespace.
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-sandbox-'))
const openDir = path.join(dataDir, 'open')
const closedDir = path.join(dataDir, 'closed')
fs.mkdirSync(openDir, { mode: 0o711 })
fs.mkdirSync(closedDir, { mode: 0o700 })
fs.chmodSync(dataDir, 0o711)
const provider = new LocalSandboxProvider({ workspaceRoot: openDir, uidBase: UID_BASE, uidCount: 400, cgroupParent: 'warren-bench', prefix: 'bench-' })
// The same, over workspaces the sandbox uid cannot reach (staged on a private mount).
const staged = new LocalSandboxProvider({ workspaceRoot: closedDir, uidBase: UID_BASE + 1800, uidCount: 400, cgroupParent: 'warren-bench', prefix: 'bench-staged-' })
// No warm pool: every create makes its cgroups and joins them on the spot.
const cold = new LocalSandboxProvider({ workspaceRoot: openDir, uidBase: UID_BASE + 400, uidCount: 400, cgroupParent: 'warren-bench', prefix: 'bench-cold-', warm: 0 })
// The service's own stack: the same provider with a network namespace, veth and rules per sandbox.
const networked = (await createLocalProvider({ workspaceRoot: openDir, prefix: 'bn', uidBase: UID_BASE + 800, uidCount: 1000 })) as LocalSandboxProvider
await networked.cleanupOrphans()
const report = provider.report()
if (report.missing.length) console.log(`host: ${report.missing.join(' ')}`)
await provider.cleanupOrphans()
await cold.cleanupOrphans()
await staged.cleanupOrphans()

const spec = (id: string): SandboxSpec => ({
  id,
  workspaceMount: '/workspace',
  env: {},
  network: { allow: [] },
  limits: { memoryBytes: 2 * 1024 ** 3, pids: 512, cpus: 1 },
})

try {
  // Warm-up: page cache, JIT, the first cgroup folders.
  for (let i = 0; i < 5; i++) {
    await spawnWait(bareBwrap)
    await spawnWait(bareSandbox)
    for (const p of [provider, staged, cold]) {
      const s = await p.create(spec(`warm${i}`))
      await s.exec({ command: 'true' })
      await s.destroy()
    }
  }

  const createAndRun = async (p: LocalSandboxProvider, id: string) => {
    await p.warmUp()
    const t = performance.now()
    const sb = await p.create(spec(id))
    const r = await sb.exec({ command: 'true' })
    const took = performance.now() - t
    if (r.exitCode !== 0) throw new Error(`exec failed: ${r.stderr}`)
    await sb.destroy()
    return took
  }
  // Interleaved so that drift of the machine hits every figure alike.
  const bwrapT: number[] = []
  const sandboxT: number[] = []
  const warmT: number[] = []
  const stagedT: number[] = []
  const coldT: number[] = []
  const netT: number[] = []
  for (let i = 0; i < rounds; i++) {
    bwrapT.push(...(await time(1, () => spawnWait(bareBwrap))))
    sandboxT.push(...(await time(1, () => spawnWait(bareSandbox))))
    warmT.push(await createAndRun(provider, `c${i}`))
    stagedT.push(await createAndRun(staged, `s${i}`))
    coldT.push(await createAndRun(cold, `k${i}`))
    netT.push(await createAndRun(networked, `n${i}`))
  }

  const sb = await provider.create(spec('rt'))
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
  const run = async () => {
    const r = await sb.exec({ command: 'true' })
    if (r.exitCode !== 0) throw new Error(`exec failed: ${r.stderr}`)
  }
  // Spaced like an agent's tool calls: the next command's shell is parked by then.
  const spacedT = await time(rounds, run, () => sleep(50))
  const burstT = await time(rounds * 2, run)
  await sb.exec({ command: 'sleep 1000 >/dev/null 2>&1 & python3 -m http.server 8000 >/dev/null 2>&1 & true' })
  const pauseT: number[] = []
  const resumeT: number[] = []
  for (let i = 0; i < rounds; i++) {
    pauseT.push(...(await time(1, () => sb.pause())))
    resumeT.push(...(await time(1, () => sb.resume())))
  }
  const destroyT = await time(1, () => sb.destroy())

  const base = p50(sandboxT)
  const vs = (x: number) => `${(x / base).toFixed(2)}× bare sandbox, ${(x / p50(bwrapT)).toFixed(2)}× bare bwrap`
  const rows: Array<[string, number, string]> = [
    ['bare bwrap spawn (root, no namespaces)', p50(bwrapT), ''],
    ['bare sandbox spawn (unprivileged, namespaces)', base, '(baseline)'],
    ['create → first command, warm pool', p50(warmT), `${vs(p50(warmT))} (target ≤ 3×)`],
    ['  same, data folder 0700 (workspace staged)', p50(stagedT), vs(p50(stagedT))],
    ['  same, no warm slot (cgroups joined inline)', p50(coldT), vs(p50(coldT))],
    ['  same, with its network namespace and rules', p50(netT), vs(p50(netT))],
    ['command round trip (exec true), 50 ms apart', p50(spacedT), vs(p50(spacedT))],
    ['command round trip, back to back', p50(burstT), vs(p50(burstT))],
    ['pause (freezer, 2 background processes)', p50(pauseT), ''],
    ['resume', p50(resumeT), `target < 50 ms: ${p50(resumeT) < 50 ? 'met' : 'MISSED'}`],
    ['destroy', destroyT[0]!, ''],
  ]
  console.log(`bench/sandbox: p50 over ${rounds} rounds (${os.cpus().length} cores, ${os.release()})`)
  for (const [name, v, note] of rows) console.log(`  ${name.padEnd(48)} ${ms(v).padStart(10)}  ${note}`)
} finally {
  await provider.close()
  await cold.close()
  await staged.close()
  await networked.close()
  fs.rmSync(dataDir, { recursive: true, force: true })
}
