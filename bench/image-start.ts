// bench/image-start: sandboxes of the local provider on the host's system against ones on the tests'
// minimal image (cached: pulled once before), in both kinds of image workspace (unprivileged, and
// root inside: a provider with root ranges), side by side in one run.
// Usage: node_modules/.bin/node bench/image-start.ts [--rounds N] [--steps N]
//
// Each round makes one sandbox of each kind in turn (host, unprivileged, root inside), so the
// machine's drift hits the three alike, and times in each: create to the end of its first command
// (`true`), then N step commands (`echo step >> /workspace/log.txt`) back to back. The ratios are
// each round's image figure over the same round's host figure, their median printed with their
// spread (min–max: a wide one says the machine was busy). Targets (issue 26): create to first
// command ≤ 1.5× the host's, a step ≤ 1.2× the host's.
//
// CPU a step: every process of this one's tree (this process, its spawners, the shells parked for
// commands, nsenter or the root entry, the commands, the sandbox's init), each with what its reaped
// children used, over the steps and the refill of the shells they took. It says what a step
// costs a loaded machine, which wall time on a shared one only hints at.
//
// Each create finds a warm slot (the pool refilled before it), as on a service with a moment
// between creates. Needs root, bubblewrap, docker-registry, skopeo and mmdebstrap (scripts/setup.sh).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'
import { imagePuller } from '../src/images/image-puller.ts'
import { pushMinimalImage, startRegistry } from '../test/registry.ts'
import { treeCpuMs } from './proc-cpu.ts'

const arg = (name: string) => (process.argv.includes(name) ? Number(process.argv[process.argv.indexOf(name) + 1]) : NaN)
const rounds = arg('--rounds') || 10
const steps = arg('--steps') || 10

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'imgbench-'))
fs.chmodSync(dir, 0o700)
const registry = await startRegistry()
await pushMinimalImage(registry, 'warren/minimal', '1')
const ref = `${registry.host}/warren/minimal:1`
const images = imagePuller({ dir: path.join(dir, 'images'), registry: { allowPrivate: ['127.0.0.1/32'] } })
const common = { cgroupParent: 'warren-bench', uidCount: 20, images }
const kinds = [
  { name: 'host system', image: false, provider: new LocalSandboxProvider({ ...common, workspaceRoot: path.join(dir, 'host'), prefix: 'bimg-host-', uidBase: 340_000 }) },
  { name: 'image, unprivileged', image: true, provider: new LocalSandboxProvider({ ...common, workspaceRoot: path.join(dir, 'plain'), prefix: 'bimg-plain-', uidBase: 350_000 }) },
  { name: 'image, root inside', image: true, provider: new LocalSandboxProvider({ ...common, workspaceRoot: path.join(dir, 'root'), prefix: 'bimg-root-', uidBase: 360_000, rootRanges: 2 }) },
]
const spec = (id: string, image: boolean) => ({ id, workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 256 << 20, pids: 128, cpus: 1 }, ...(image ? { image: { ref } } : {}) })
const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!
const cpuNow = () => treeCpuMs(process.pid).total
const settle = () => new Promise((r) => setTimeout(r, 150))

type Round = { start: number; step: number; cpu: number }
const results = kinds.map(() => [] as Round[])

async function round(k: (typeof kinds)[number], id: string): Promise<Round> {
  await k.provider.warmUp()
  const t0 = performance.now()
  const sb = await k.provider.create(spec(id, k.image))
  const first = await sb.exec({ command: 'true' })
  const start = performance.now() - t0
  if (first.exitCode !== 0) throw new Error(`${k.name}: the first command failed: ${first.stderr}`)
  // The slot it took is made again now, and the shells parked after the first command are ready:
  // neither is a step's.
  await k.provider.warmUp()
  await settle()
  const c0 = cpuNow()
  const times: number[] = []
  for (let j = 0; j < steps; j++) {
    const t = performance.now()
    const r = await sb.exec({ command: 'echo step >> /workspace/log.txt' })
    times.push(performance.now() - t)
    if (r.exitCode !== 0) throw new Error(`${k.name}: a step failed: ${r.stderr}`)
  }
  // The shells the last steps took are parked again before the count ends.
  await settle()
  const cpu = (cpuNow() - c0) / steps
  await sb.destroy()
  return { start, step: median(times), cpu }
}

try {
  // Warm-up, not counted: the cache is pulled, the page cache and the spawners are warm.
  for (const [i, k] of kinds.entries()) await (await k.provider.create(spec(`warm${i}`, k.image))).destroy()
  for (let i = 0; i < rounds; i++) for (const [j, k] of kinds.entries()) results[j]!.push(await round(k, `r${i}`))

  const ms = (x: number) => `${x.toFixed(1)} ms`.padStart(9)
  const spread = (a: number[], f: (x: number) => string) => `${f(median(a))} (${f(Math.min(...a)).trim()}–${f(Math.max(...a)).trim()})`
  const ratio = (x: number) => `${x.toFixed(2)}×`
  const load = os.loadavg()[0]!.toFixed(1)
  console.log(`bench/image-start: ${rounds} rounds × ${steps} steps, kinds interleaved (${os.cpus().length} cores, load average ${load} at the end)`)
  console.log(`${''.padEnd(21)} ${'create→first command'.padEnd(28)} ${'a step'.padEnd(28)} CPU a step (all processes)`)
  for (const [j, k] of kinds.entries()) {
    const r = results[j]!
    console.log(`${k.name.padEnd(21)} ${spread(r.map((x) => x.start), ms).padEnd(28)} ${spread(r.map((x) => x.step), ms).padEnd(28)} ${spread(r.map((x) => x.cpu), ms)}`)
  }
  console.log('ratios to the host system, each round over its own host sandbox: median (min–max)')
  for (const [j, k] of kinds.entries()) {
    if (!k.image) continue
    const per = (f: (x: Round) => number) => results[j]!.map((x, i) => f(x) / f(results[0]![i]!))
    const start = per((x) => x.start)
    const step = per((x) => x.step)
    const met = (a: number[], target: number) => (median(a) <= target ? 'met' : 'MISSED')
    console.log(
      `${k.name.padEnd(21)} create→first command ${spread(start, ratio)} target ≤ 1.5×: ${met(start, 1.5)}   ` +
        `step ${spread(step, ratio)} target ≤ 1.2×: ${met(step, 1.2)}   CPU a step ${spread(per((x) => x.cpu), ratio)}`,
    )
  }
} finally {
  for (const k of kinds) await k.provider.close()
  await registry.stop()
  fs.rmSync(dir, { recursive: true, force: true })
}
