import { after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { SandboxSpec } from '../src/sandbox/sandbox.ts'
import { LocalSandboxProvider, type LocalProviderOptions } from '../src/sandbox/local/local-provider.ts'
import { isMountPoint } from '../src/sandbox/local/workspace-disk.ts'
import { packFolder } from '../src/sandbox/local/workspace-pack.ts'

/**
 * A workspace's disk quota on this host: its folder is a file system of its own, so a write past
 * the quota fails in the workspace with ENOSPC (never on the disk that holds the store), the
 * sandbox goes on, the quota and the files survive a service stop (a fresh boot mounts nothing),
 * and deleting the workspace leaves no mount or image behind.
 */

const skip =
  process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap && command -v mke2fs']).status !== 0 ? 'needs bubblewrap and mke2fs (scripts/setup.sh)' : false

const MiB = 1024 * 1024
const mountsUnder = (dir: string) => fs.readFileSync('/proc/mounts', 'utf8').split('\n').filter((l) => l.split(' ')[1]?.startsWith(dir))

describe('workspace disk quota', { skip }, () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-disk-test-'))
  fs.chmodSync(dataDir, 0o700)
  const root = path.join(dataDir, 'workspaces')
  const tag = randomBytes(3).toString('hex')
  const uidBase = 300_000 + (randomBytes(2).readUInt16BE() % 600) * 100
  const providers: LocalSandboxProvider[] = []
  const provider = (more: Partial<LocalProviderOptions> = {}) => {
    const p = new LocalSandboxProvider({ cgroupParent: 'warren-test', workspaceRoot: root, prefix: `t${tag}-disk-`, uidBase, uidCount: 20, diskBytes: 32 * MiB, ...more })
    providers.push(p)
    return p
  }
  after(async () => {
    for (const p of providers) await p.close().catch(() => {})
    fs.rmSync(dataDir, { recursive: true, force: true })
  })
  const spec = (id: string, existing = false): SandboxSpec => ({ id, existing, workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 256 * MiB, pids: 64, cpus: 1 } })

  it('refuses a write past the quota with ENOSPC in the workspace, and the sandbox goes on', async () => {
    const p = provider()
    // Shells parked ahead, in mount namespaces made before the workspace is mounted (as in the service).
    await p.warmUp()
    const sb = await p.create(spec('full'))
    const ls = await sb.exec({ command: 'ls -A' })
    assert.equal(ls.stdout.toString(), '', 'an empty workspace (no lost+found)')
    const r = await sb.exec({ command: 'head -c 64M /dev/zero > big.bin' })
    assert.notEqual(r.exitCode, 0)
    assert.match(r.stderr.toString(), /No space left on device/)
    const size = fs.statSync(path.join(root, 'full', 'big.bin')).size
    assert.ok(size < 32 * MiB, `${size} bytes written under a 32 MiB quota`)
    // The host paid for no more than the quota.
    const image = path.join(root, '.disks', 'full.ext4')
    assert.ok(fs.statSync(image).blocks * 512 <= 33 * MiB)
    assert.equal((await sb.exec({ command: 'rm big.bin && echo room > f.txt && cat f.txt' })).stdout.toString(), 'room\n')
  })

  it('keeps files and quota across a service stop, reads them before any sandbox, and leaves nothing behind once deleted', async () => {
    // Empty images made ahead: the earlier test's provider still holds its own.
    const blanks = () => fs.readdirSync(path.join(root, '.disks')).filter((f) => f.startsWith('.blank-'))
    const others = blanks()
    const first = provider()
    const sb = await first.create(spec('kept'))
    assert.equal((await sb.exec({ command: 'echo kept > k.txt' })).exitCode, 0)
    await first.close()
    assert.deepEqual(mountsUnder(path.join(root, 'kept')), [], 'a stopped service leaves no mount')
    assert.deepEqual(blanks(), others, 'no image it made ahead is left')
    // As after a boot: nothing mounted, the image in place, and an image a killed service was making ahead.
    fs.writeFileSync(path.join(root, '.disks', '.blank-left.ext4'), '')
    const second = provider()
    await second.cleanupOrphans()
    assert.equal(fs.existsSync(path.join(root, '.disks', '.blank-left.ext4')), false, 'removed at start')
    assert.equal((await second.workspace('kept').readFile('k.txt'))?.toString(), 'kept\n')
    const again = await second.create(spec('kept', true))
    assert.equal((await again.exec({ command: 'cat k.txt' })).stdout.toString(), 'kept\n')
    assert.match((await again.exec({ command: 'head -c 64M /dev/zero > big.bin' })).stderr.toString(), /No space left on device/)
    await second.deleteWorkspace('kept')
    assert.deepEqual(mountsUnder(path.join(root, 'kept')), [])
    assert.equal(fs.existsSync(path.join(root, '.disks', 'kept.ext4')), false)
    assert.equal(fs.existsSync(path.join(root, 'kept')), false)
  })

  it('a workspace whose file system cannot be made fails its create, and quotas stay on for the next', async () => {
    // The disk that holds the images full for a moment: a tmpfs of its own, filled up.
    const small = fs.mkdtempSync(path.join(dataDir, 'small-'))
    assert.equal(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=128m', 'tmpfs', small]).status, 0)
    try {
      const p = provider({ workspaceRoot: path.join(small, 'workspaces') })
      const filler = path.join(small, 'filler')
      spawnSync('sh', ['-c', `head -c 200M /dev/zero > ${filler}`])
      await assert.rejects(p.create(spec('crowded')), /file system could not be mounted/)
      fs.rmSync(filler)
      const sb = await p.create(spec('roomy'))
      const r = await sb.exec({ command: 'head -c 64M /dev/zero > big.bin' })
      assert.match(r.stderr.toString(), /No space left on device/, 'the quota still holds once the disk has room again')
      assert.equal(p.report().missing.some((m) => m.includes('disk quota')), false, p.report().missing.join('; '))
      await p.close()
    } finally {
      spawnSync('umount', ['-l', small])
    }
  })

  it('a host without loop devices keeps plain folders and says so in its report at start', () => {
    // The provider in a mount namespace whose /dev has no loop devices.
    const providerUrl = new URL('../src/sandbox/local/local-provider.ts', import.meta.url).href
    const script = `import { LocalSandboxProvider } from '${providerUrl}'
      const p = new LocalSandboxProvider({ workspaceRoot: '${path.join(dataDir, 'noloop')}', uidBase: ${uidBase}, uidCount: 20, diskBytes: ${32 * MiB} })
      console.log(JSON.stringify(p.report().missing))`
    const inside = `mount -t tmpfs tmpfs /dev && exec "$0" --input-type=module -e "$1"`
    const r = spawnSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', inside, process.execPath, script], { encoding: 'utf8' })
    assert.equal(r.status, 0, r.stderr)
    const missing = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as string[]
    assert.ok(missing.some((m) => m.startsWith('workspace disk quotas (mount failed')), missing.join('; '))
  })

  it('restores a snapshot into the workspace\'s file system: one past the quota fails saying so, and nothing of it stays on the host', async () => {
    const p = provider()
    const src = fs.mkdtempSync(path.join(dataDir, 'snap-'))
    fs.writeFileSync(path.join(src, 'small.txt'), 'kept\n')
    const small = await packFolder(src)
    assert.equal(await p.unpackWorkspace('restored', small!), true)
    const dir = path.join(root, 'restored')
    assert.ok(isMountPoint(dir), 'restored into a file system of its own')
    assert.deepEqual(fs.readdirSync(dir), ['small.txt'])
    const sb = await p.create(spec('restored', true))
    assert.equal((await sb.exec({ command: 'cat small.txt' })).stdout.toString(), 'kept\n')
    assert.match((await sb.exec({ command: 'head -c 64M /dev/zero > big.bin' })).stderr.toString(), /No space left on device/)
    await sb.destroy()

    // 48 MiB of random bytes (no file system may store them in less) under a 32 MiB quota.
    fs.writeFileSync(path.join(src, 'big.bin'), randomBytes(48 * MiB))
    const big = await packFolder(src)
    await assert.rejects(p.unpackWorkspace('toobig', big!), /the snapshot of toobig does not fit its workspace's disk quota of 33554432 bytes/)
    const left = path.join(root, 'toobig')
    assert.ok(!fs.existsSync(left) || fs.readdirSync(left).length === 0, 'nothing of it in the workspace folder')
    assert.deepEqual(mountsUnder(left), [], 'its file system dropped')
    assert.ok(!fs.existsSync(path.join(root, '.disks', 'toobig.ext4')))
    assert.deepEqual(fs.readdirSync(root).filter((f) => f.startsWith('.unpack-')), [], 'nothing unpacked beside it on the host')
    assert.deepEqual(fs.readdirSync(path.join(root, '.disks')).filter((f) => f.startsWith('.restore-')), [], 'nor the file system it was unpacked into')
    assert.deepEqual(mountsUnder(path.join(root, '.disks')), [])
  })

  it('a restore cut short (the service killed) leaves the workspace as it was, and the next start removes what it was filling', async () => {
    const p = provider()
    await p.warmUp()
    // What a restore leaves when its service dies part way: a file system half filled, still mounted.
    const tag = '.restore-cut-0a1b2c3d'
    const image = path.join(root, '.disks', `${tag}.ext4`)
    const point = path.join(root, '.disks', tag)
    fs.mkdirSync(point)
    fs.closeSync(fs.openSync(image, 'wx', 0o600))
    fs.truncateSync(image, 16 * MiB)
    execFileSync('mke2fs', ['-q', '-F', '-t', 'ext4', image])
    execFileSync('mount', ['-o', 'loop', '--', image, point])
    fs.writeFileSync(path.join(point, 'half.txt'), 'half')
    assert.ok(!fs.existsSync(path.join(root, 'cut')), 'the workspace was never made: nothing of the cut restore is in it')
    const next = provider()
    await next.cleanupOrphans()
    assert.deepEqual(mountsUnder(point), [])
    assert.ok(!fs.existsSync(point) && !fs.existsSync(image), 'its leftovers removed')
  })

  it('moves a workspace made before quotas into a file system of its own, its files kept', async () => {
    const plain = provider({ diskBytes: 0 })
    const sb = await plain.create(spec('old'))
    await sb.exec({ command: 'mkdir -p d && echo old > d/o.txt' })
    await sb.destroy()
    const p = provider()
    const moved = await p.create(spec('old', true))
    assert.equal((await moved.exec({ command: 'cat d/o.txt' })).stdout.toString(), 'old\n')
    assert.match((await moved.exec({ command: 'head -c 64M /dev/zero > big.bin' })).stderr.toString(), /No space left on device/)
  })
})
