// bench/image-pull: pulling an image from a real registry on loopback (docker-registry), side by
// side in one run: Warren's first pull into an empty cache (download, verify, unpack), skopeo
// copying the same image to a local folder (download and verify only: nothing unpacked), and a
// second pull from the warm cache. Beside each pull, the service's event-loop delay while it ran
// (layers are written synchronously as the tar parser emits entries). Medians of N rounds of the
// tests' minimal image (busybox and libc, two layers, 14 MB of tar); then one round of the
// toolchain image (Debian's Go with apt, one layer, 286 MB of tar, 86 MB gzipped), the issue's
// "first pull of the toolchain image against skopeo copy of it".
// Usage: node_modules/.bin/node bench/image-pull.ts [--rounds N]
// Needs docker-registry, skopeo and mmdebstrap (scripts/setup.sh); both images are built once into
// ~/.cache/warren-test-images (the toolchain one in about two minutes).
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { imagePuller } from '../src/images/image-puller.ts'
import { pushMinimalImage, startRegistry } from '../test/registry.ts'
import { pushToolchainImage } from '../test/toolchain-image.ts'

const rounds = Number(process.argv[process.argv.indexOf('--rounds') + 1]) || 5
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const registry = await startRegistry()
try {
  await pushMinimalImage(registry, 'bench/minimal', '1')
  const ref = `${registry.host}/bench/minimal:1`
  const first: number[] = []
  const cached: number[] = []
  const skopeo: number[] = []
  const delayMax: number[] = []
  const delayP99: number[] = []
  const idleMax: number[] = []
  const idleP99: number[] = []
  const tarX: number[] = []
  for (let i = 0; i < rounds; i++) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-images-'))
    try {
      const puller = imagePuller({ dir, registry: { allowPrivate: ['127.0.0.1/32'] } })
      const h = monitorEventLoopDelay({ resolution: 1 })
      h.enable()
      let t = performance.now()
      await puller.pull(ref)
      first.push(performance.now() - t)
      h.disable()
      delayMax.push(h.max / 1e6)
      delayP99.push(h.percentile(99) / 1e6)
      t = performance.now()
      await puller.pull(ref)
      cached.push(performance.now() - t)
      const idle = monitorEventLoopDelay({ resolution: 1 })
      idle.enable()
      await new Promise((r) => setTimeout(r, first.at(-1)))
      idle.disable()
      idleMax.push(idle.max / 1e6)
      idleP99.push(idle.percentile(99) / 1e6)
      t = performance.now()
      const copy = path.join(dir, 'skopeo')
      execFileSync('skopeo', ['copy', '--quiet', '--src-tls-verify=false', `docker://${ref}`, `dir:${copy}`])
      skopeo.push(performance.now() - t)
      const manifest = JSON.parse(fs.readFileSync(path.join(copy, 'manifest.json'), 'utf8')) as { layers: { digest: string }[] }
      t = performance.now()
      for (const l of manifest.layers) {
        const into = path.join(dir, 'tar', l.digest.slice(7))
        fs.mkdirSync(into, { recursive: true })
        execFileSync('tar', ['-xzf', path.join(copy, l.digest.slice(7)), '-C', into])
      }
      tarX.push(performance.now() - t)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
  const f = (n: number) => `${n.toFixed(1)} ms`
  console.log(`image pull, ${rounds} rounds (medians):`)
  console.log(`  first pull (download, verify, unpack)   ${f(median(first))}`)
  console.log(`  skopeo copy to a folder (no unpack)     ${f(median(skopeo))}   ratio ${(median(first) / median(skopeo)).toFixed(2)}x`)
  console.log(`  tar -xzf of those layers (unpack only)  ${f(median(tarX))}   skopeo + tar ${f(median(skopeo) + median(tarX))}, ratio ${(median(first) / (median(skopeo) + median(tarX))).toFixed(2)}x`)
  console.log(`  second pull (cache hit: manifest only)  ${f(median(cached))}`)
  console.log(`  event-loop delay during a first pull    p99 ${f(median(delayP99))}, max ${f(median(delayMax))}`)
  console.log(`  event-loop delay idle, as long          p99 ${f(median(idleP99))}, max ${f(median(idleMax))}`)

  // The toolchain image, once: its first pull beside skopeo copy of it (and tar -xzf of its layer).
  await pushToolchainImage(registry, 'bench/toolchain', '1')
  const toolRef = `${registry.host}/bench/toolchain:1`
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-images-'))
  try {
    const puller = imagePuller({ dir, registry: { allowPrivate: ['127.0.0.1/32'] } })
    const h = monitorEventLoopDelay({ resolution: 1 })
    h.enable()
    let t = performance.now()
    await puller.pull(toolRef)
    const pulled = performance.now() - t
    h.disable()
    t = performance.now()
    const copy = path.join(dir, 'skopeo')
    execFileSync('skopeo', ['copy', '--quiet', '--src-tls-verify=false', `docker://${toolRef}`, `dir:${copy}`])
    const copied = performance.now() - t
    const manifest = JSON.parse(fs.readFileSync(path.join(copy, 'manifest.json'), 'utf8')) as { layers: { digest: string }[] }
    t = performance.now()
    for (const l of manifest.layers) {
      const into = path.join(dir, 'tar', l.digest.slice(7))
      fs.mkdirSync(into, { recursive: true })
      execFileSync('tar', ['-xzf', path.join(copy, l.digest.slice(7)), '-C', into])
    }
    const untarred = performance.now() - t
    console.log('toolchain image, 1 round:')
    console.log(`  first pull (download, verify, unpack)   ${f(pulled)}`)
    console.log(`  skopeo copy to a folder (no unpack)     ${f(copied)}   ratio ${(pulled / copied).toFixed(2)}x`)
    console.log(`  tar -xzf of its layer (unpack only)     ${f(untarred)}   skopeo + tar ${f(copied + untarred)}, ratio ${(pulled / (copied + untarred)).toFixed(2)}x`)
    console.log(`  event-loop delay during the first pull  p99 ${f(h.percentile(99) / 1e6)}, max ${f(h.max / 1e6)}`)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
} finally {
  await registry.stop()
}
