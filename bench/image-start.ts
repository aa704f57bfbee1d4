// bench/image-start: a sandbox of the local provider on the host's system against one on the tests'
// minimal image (cached: pulled once before), unprivileged and with root inside, side by side in one
// run: create to the first command's end, and a step's command (`echo step >> /workspace/log.txt`)
// through the sandbox. Medians of 8 sandboxes × 10 commands each. Needs root, bubblewrap,
// docker-registry, skopeo and mmdebstrap (scripts/setup.sh).
// Usage: node_modules/.bin/node bench/image-start.ts
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'
import { imagePuller } from '../src/images/image-puller.ts'
import { pushMinimalImage, startRegistry } from '../test/registry.ts'

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'imgbench-'))
fs.chmodSync(dir, 0o700)
const registry = await startRegistry()
await pushMinimalImage(registry, 'warren/minimal', '1')
const ref = `${registry.host}/warren/minimal:1`
const provider = new LocalSandboxProvider({ cgroupParent: 'warren-test', workspaceRoot: path.join(dir, 'ws'), prefix: 'tbench-', uidBase: 350_000, uidCount: 20, rootRanges: 2, images: imagePuller({ dir: path.join(dir, 'images'), registry: { allowPrivate: ['127.0.0.1/32'] } }) })
const plain = new LocalSandboxProvider({ cgroupParent: 'warren-test', workspaceRoot: path.join(dir, 'ws2'), prefix: 'tbenchp-', uidBase: 360_000, uidCount: 20, images: imagePuller({ dir: path.join(dir, 'images'), registry: { allowPrivate: ['127.0.0.1/32'] } }) })
const spec = (id: string, image?: boolean) => ({ id, workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 256 << 20, pids: 128, cpus: 1 }, ...(image ? { image: { ref } } : {}) })
const p50 = (a: number[]) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)]!.toFixed(1)
// warm the cache
await (await provider.create(spec('warm', true))).destroy()
for (const [name, prov, image] of [['host system', provider, false], ['image, unprivileged', plain, true], ['image, root inside', provider, true]] as const) {
  const start: number[] = []
  const step: number[] = []
  for (let i = 0; i < 8; i++) {
    const t0 = performance.now()
    const sb = await prov.create(spec(`${name.replace(/\W/g, '')}${i}`, image))
    await sb.exec({ command: 'true' })
    start.push(performance.now() - t0)
    for (let j = 0; j < 10; j++) {
      const t = performance.now()
      await sb.exec({ command: 'echo step >> /workspace/log.txt' })
      step.push(performance.now() - t)
    }
    await sb.destroy()
  }
  console.log(`${name.padEnd(22)} create→first command p50 ${p50(start)} ms   command p50 ${p50(step)} ms`)
}
await provider.close(); await plain.close(); await registry.stop()
fs.rmSync(dir, { recursive: true, force: true })
