import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { SandboxImageError, type ImageProgress, type Sandbox, type SandboxSpec } from '../src/sandbox/sandbox.ts'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'
import { imagePuller, type ImagePuller } from '../src/images/image-puller.ts'
import { minimalImageLayout, pushImage, pushMinimalImage, sha256, startRegistry, type BuiltLayer, type Registry } from './registry.ts'

/**
 * Sandboxes of the local provider on an image, through the provider itself: a real registry on
 * loopback, the minimal busybox image built by mmdebstrap, real overlayfs and bubblewrap.
 */

const skip = process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap && command -v docker-registry && command -v skopeo']).status !== 0 ? 'needs bubblewrap, docker-registry and skopeo' : false
const run = randomBytes(3).toString('hex')
const MiB = 1024 * 1024

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-image-sandbox-test-'))
fs.chmodSync(dataDir, 0o700)
const workspaceRoot = path.join(dataDir, 'workspaces')
after(() => fs.rmSync(dataDir, { recursive: true, force: true }))

const field = (status: string, name: string) => status.match(new RegExp(`^${name}:\\s*(\\S+)`, 'm'))?.[1]

/** The minimal image's layers as the layout holds them, to push again under another config. */
async function minimalLayers(): Promise<BuiltLayer[]> {
  const layout = await minimalImageLayout()
  const blob = (digest: string) => fs.readFileSync(path.join(layout, 'blobs', 'sha256', digest.slice(7)))
  const index = JSON.parse(fs.readFileSync(path.join(layout, 'index.json'), 'utf8'))
  const manifest = JSON.parse(blob(index.manifests[0].digest).toString())
  const config = JSON.parse(blob(manifest.config.digest).toString())
  return manifest.layers.map((l: { digest: string; mediaType: string }, i: number) => ({ tar: Buffer.alloc(0), blob: blob(l.digest), digest: l.digest, diffId: config.rootfs.diff_ids[i], mediaType: l.mediaType }))
}

describe('sandboxes on an image', { skip }, () => {
  let registry: Registry
  let minimal: string
  let minimalDigest: string
  let configured: string
  let provider: LocalSandboxProvider
  let images: ImagePuller
  /** The cache's clock: the last test moves it past the keep time. */
  let clock = Date.now()
  const live: Sandbox[] = []
  const spec = (id: string, image: SandboxSpec['image'], extra: Partial<SandboxSpec> = {}): SandboxSpec => ({
    id,
    workspaceMount: '/workspace',
    env: {},
    network: { allow: [] },
    limits: { memoryBytes: 256 * MiB, pids: 128, cpus: 1 },
    ...(image ? { image } : {}),
    ...extra,
  })
  const create = async (s: SandboxSpec) => {
    const sb = await provider.create(s)
    live.push(sb)
    return sb
  }
  const sh = async (sb: Sandbox, command: string, cwd?: string) => {
    const r = await sb.exec({ command, ...(cwd ? { cwd } : {}) })
    return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() }
  }

  before(async () => {
    registry = await startRegistry()
    await pushMinimalImage(registry, 'warren/minimal', '1')
    minimal = `${registry.host}/warren/minimal:1`
    const res = await fetch(`${registry.url}/v2/warren/minimal/manifests/1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })
    minimalDigest = sha256(Buffer.from(await res.arrayBuffer()))
    // The same layers with an Env and a WorkingDir of their own.
    await pushImage(registry, 'warren/configured', '1', await minimalLayers(), {
      config: { Env: ['PATH=/usr/bin:/bin', 'FROM_IMAGE=image value', 'BOTH=the image'], WorkingDir: '/srv' },
    })
    configured = `${registry.host}/warren/configured:1`
    images = imagePuller({ dir: path.join(dataDir, 'images'), registry: { allowPrivate: ['127.0.0.1/32'] }, keepMs: 60_000, now: () => clock })
    provider = new LocalSandboxProvider({
      cgroupParent: 'warren-test',
      workspaceRoot,
      prefix: `t${run}-img-`,
      uidBase: 300_000 + (randomBytes(2).readUInt16BE() % 600) * 100,
      uidCount: 20,
      images,
    })
  })

  after(async () => {
    for (const sb of live) await sb.destroy()
    await provider?.close()
    await registry?.stop()
  })

  it("runs on the image's root, with progress and the digest it resolved to", async () => {
    const progress: ImageProgress[] = []
    const sb = await create(spec('root', { ref: minimal }, { onImageProgress: (p) => progress.push(p) }))
    assert.deepEqual(sb.image, { ref: minimal, digest: minimalDigest })
    assert.ok(progress.length > 0, 'progress was reported')
    assert.equal(progress.at(-1)!.layers, 2)
    assert.equal(progress.at(-1)!.layersLeft, 0)
    // The upper layer's file, and its opaque folder hiding the lower one's files.
    const r = await sh(sb, 'busybox cat /srv/hello /etc/apt/only-this; busybox ls /etc/apt')
    assert.equal(r.code, 0, r.err)
    assert.equal(r.out, 'hello from the image\nthe lower etc/apt is hidden\nonly-this\n')
    // Nothing of the host's system: its perl, node and service data are not there.
    for (const p of ['/usr/bin/perl', process.execPath, dataDir, '/etc/ssl']) {
      assert.ok(fs.existsSync(p), `${p} exists on the host`)
      const gone = await sh(sb, `[ ! -e '${p}' ]`)
      assert.equal(gone.code, 0, `${p} is seen inside`)
    }
  })

  it('pins a digest, and reports what it runs on', async () => {
    const sb = await create(spec('pinned', { ref: minimal, digest: minimalDigest }))
    assert.deepEqual(sb.image, { ref: minimal, digest: minimalDigest })
    await assert.rejects(provider.create(spec('pinned-wrong', { ref: configured, digest: minimalDigest })), SandboxImageError)
  })

  it('keeps /workspace the workspace, with the service its own /tmp, /proc and resolv.conf', async () => {
    const sb = await create(spec('ws', { ref: minimal }))
    await sb.writeFile('from-service.txt', Buffer.from('hi\n'))
    const r = await sh(sb, 'busybox cat /workspace/from-service.txt && echo made > /workspace/from-sandbox.txt && busybox pwd')
    assert.equal(r.code, 0, r.err)
    assert.equal(r.out, 'hi\n/workspace\n')
    assert.equal((await provider.workspace('ws').readFile('from-sandbox.txt'))?.toString(), 'made\n')
    const mounts = await sh(sb, 'busybox cat /proc/self/mountinfo')
    assert.match(mounts.out, / \/ [^\n]* - overlay /, 'the root is an overlay')
    assert.match(mounts.out, / \/tmp [^\n]* - tmpfs /)
    // Writable by every user of the image, as a system's /tmp is (apt's _apt writes there).
    assert.equal((await sh(sb, 'busybox stat -c %a /tmp')).out, '1777\n')
    assert.match(mounts.out, / \/etc\/resolv.conf /)
    // Mounted in the sandbox's own mount namespace: the host never sees the overlay.
    assert.ok(!fs.readFileSync('/proc/self/mountinfo', 'utf8').includes(path.join(workspaceRoot, '.layers', 'ws')), 'the overlay is not mounted on the host')
  })

  it('keeps writes to / in its own layer: another sandbox on the image does not see them, its next run does', async () => {
    const a = await create(spec('layer-a', { ref: minimal }))
    const b = await create(spec('layer-b', { ref: minimal }))
    const w = await sh(a, 'busybox mkdir -p /opt/mine && echo mine > /opt/mine/f && busybox cat /opt/mine/f')
    assert.equal(w.code, 0, w.err)
    assert.equal(w.out, 'mine\n')
    const seen = await sh(b, 'busybox cat /srv/hello; [ ! -e /opt/mine ] && echo absent')
    assert.equal(seen.out, 'hello from the image\nabsent\n')
    // The shared layer in the cache is untouched; the write is in a's upper folder.
    const cached = fs.readdirSync(path.join(dataDir, 'images', 'layers')).map((d) => path.join(dataDir, 'images', 'layers', d, 'srv', 'hello')).filter((f) => fs.existsSync(f))
    assert.deepEqual(cached.map((f) => fs.readFileSync(f, 'utf8')), ['hello from the image\n'])
    assert.equal(fs.readFileSync(path.join(workspaceRoot, '.layers', 'layer-a', 'upper', 'opt', 'mine', 'f'), 'utf8'), 'mine\n')
    // Reclaimed and brought back: its layer is still its own.
    await a.destroy()
    const again = await create(spec('layer-a', { ref: minimal, digest: a.image!.digest }, { existing: true }))
    assert.equal((await sh(again, 'busybox cat /opt/mine/f')).out, 'mine\n')
    await provider.deleteWorkspace('layer-a')
    assert.ok(!fs.existsSync(path.join(workspaceRoot, '.layers', 'layer-a')), 'deleting the workspace removes its layer')
  })

  it('follows no link its own layer holds where its mounts go, when it comes back', async () => {
    const sb = await create(spec('planted', { ref: minimal }))
    await sb.destroy()
    // What a run could leave in its layer (or anyone with the layer's folder): links out to the host.
    const upper = path.join(workspaceRoot, '.layers', 'planted', 'upper')
    const decoy = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-decoy-'))
    fs.rmSync(path.join(upper, 'etc'), { recursive: true, force: true })
    fs.symlinkSync(decoy, path.join(upper, 'etc'))
    fs.rmSync(path.join(upper, 'workspace'), { recursive: true, force: true })
    fs.symlinkSync(decoy, path.join(upper, 'workspace'))
    try {
      const again = await create(spec('planted', { ref: minimal }, { existing: true }))
      assert.deepEqual(fs.readdirSync(decoy), [], 'nothing was made through the links')
      assert.ok(fs.lstatSync(path.join(upper, 'etc')).isDirectory())
      const r = await sh(again, 'busybox cat /etc/apt/only-this && echo in > /workspace/w && busybox pwd')
      assert.equal(r.code, 0, r.err)
      assert.equal(r.out, 'the lower etc/apt is hidden\n/workspace\n')
      assert.equal((await provider.workspace('planted').readFile('w'))?.toString(), 'in\n')
    } finally {
      fs.rmSync(decoy, { recursive: true, force: true })
    }
  })

  it("applies the image's Env under the service's, and its WorkingDir", async () => {
    const sb = await create(spec('cfg', { ref: configured }, { env: { BOTH: 'the service' } }))
    const r = await sh(sb, 'echo "$FROM_IMAGE|$BOTH|$PATH"; busybox pwd')
    assert.equal(r.code, 0, r.err)
    assert.equal(r.out, 'image value|the service|/usr/bin:/bin\n/srv\n')
    // A folder named is still the workspace's.
    assert.equal((await sh(sb, 'busybox pwd', '.')).out, '/workspace\n')
  })

  it('holds the walls: no_new_privs, the syscall filter, no user namespace of its own', async () => {
    const sb = await create(spec('walls', { ref: minimal }))
    const status = (await sh(sb, 'busybox cat /proc/self/status')).out
    assert.equal(field(status, 'NoNewPrivs'), '1')
    assert.equal(field(status, 'Seccomp'), '2')
    assert.equal(field(status, 'CapEff'), '0000000000000000')
    const userns = await sh(sb, 'busybox unshare -U -r true')
    assert.notEqual(userns.code, 0, 'a user namespace of its own was made')
  })

  it('refuses an unknown tag with SandboxImageError, and can create after', async () => {
    const err = await provider.create(spec('unknown', { ref: `${registry.host}/warren/minimal:no-such-tag` })).then(
      () => assert.fail('created'),
      (e: unknown) => e,
    )
    assert.ok(err instanceof SandboxImageError, String(err))
    assert.match(err.message, /no-such-tag/)
    assert.ok(!fs.existsSync(path.join(workspaceRoot, 'unknown')), 'no workspace was made for it')
    const sb = await create(spec('unknown', { ref: minimal }))
    assert.equal((await sh(sb, 'true')).code, 0)
  })

  it("holds its image's layers in the cache while it lives: a sweep past the keep time leaves them, and takes them once it is gone", async () => {
    const sb = live.at(-1)!
    clock += 10 * 60_000
    assert.deepEqual(await images.sweep(), [])
    assert.equal((await sh(sb, 'busybox cat /srv/hello')).out, 'hello from the image\n')
    for (const s of live) await s.destroy()
    // Their keep time counts from their end.
    assert.deepEqual(await images.sweep(), [])
    clock += 10 * 60_000
    assert.equal(await images.sweep().then((r) => r.length), 2, "the minimal image's two layers (the configured image shares them)")
    assert.deepEqual(fs.readdirSync(path.join(dataDir, 'images', 'layers')), [])
  })
})

describe('sandboxes on an image, root inside their own walls', { skip }, () => {
  let registry: Registry
  let minimal: string
  let provider: LocalSandboxProvider
  const uidBase = 300_000 + (randomBytes(2).readUInt16BE() % 600) * 100
  const live: Sandbox[] = []
  const create = async (id: string) => {
    const sb = await provider.create({ id, workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 256 * MiB, pids: 128, cpus: 1 }, image: { ref: minimal } })
    live.push(sb)
    return sb
  }
  const sh = async (sb: Sandbox, command: string) => {
    const r = await sb.exec({ command })
    return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() }
  }

  before(async () => {
    registry = await startRegistry()
    await pushMinimalImage(registry, 'warren/minimal', '1')
    minimal = `${registry.host}/warren/minimal:1`
    provider = new LocalSandboxProvider({
      cgroupParent: 'warren-test',
      workspaceRoot: path.join(dataDir, 'root-workspaces'),
      prefix: `t${run}-root-`,
      uidBase,
      uidCount: 20,
      rootRanges: 3,
      images: imagePuller({ dir: path.join(dataDir, 'root-images'), registry: { allowPrivate: ['127.0.0.1/32'] } }),
    })
  })

  after(async () => {
    for (const sb of live) await sb.destroy()
    await provider?.close()
    await registry?.stop()
  })

  it('claims a range of host uids per sandbox beyond its own uids', () => {
    assert.equal(provider.claim.uidBase, uidBase)
    assert.equal(provider.claim.uidCount, 20 + 3 * 65_536)
  })

  it("is uid 0 owning the image's files, and its writes land in its layer as an unprivileged host uid", async () => {
    const sb = await create('rootA')
    const base = uidBase + 20
    const id = await sh(sb, 'busybox id -u; busybox id -g; busybox stat -c "%u:%g" /srv/hello /srv/owned/file')
    assert.equal(id.code, 0, id.err)
    assert.equal(id.out, '0\n0\n0:0\n1234:2345\n')
    const w = await sh(sb, 'echo changed > /srv/hello && echo mine > /opt-f && busybox chown 1000:1001 /opt-f && busybox stat -c "%u:%g" /opt-f && busybox chown 0:0 /srv/owned/file && busybox cat /srv/owned/file')
    assert.equal(w.code, 0, w.err)
    assert.equal(w.out, '1000:1001\nowned\n')
    const upper = path.join(dataDir, 'root-workspaces', '.layers', 'rootA', 'upper')
    const st = fs.statSync(path.join(upper, 'opt-f'))
    assert.deepEqual([st.uid, st.gid], [base + 1000, base + 1001], 'the host sees a uid of its range')
    assert.equal(fs.statSync(path.join(upper, 'srv', 'hello')).uid, base)
    // The shared cache is as pulled.
    const cached = fs.readdirSync(path.join(dataDir, 'root-images', 'layers')).map((d) => path.join(dataDir, 'root-images', 'layers', d, 'srv')).filter((f) => fs.existsSync(f))
    assert.equal(fs.readFileSync(path.join(cached[0]!, 'hello'), 'utf8'), 'hello from the image\n')
    assert.equal(fs.statSync(path.join(cached[0]!, 'owned', 'file')).uid, 1234)
    // Its processes inside its user namespace, seen from the host, run as the range's first uid
    // (bubblewrap's own pid 1 as the sandbox's uid): no host root. (The cgroup also holds the
    // service's shells parked to enter it, which are outside it until they do.)
    const hostNs = fs.readlinkSync('/proc/self/ns/user')
    const uids = (sb as unknown as { pids(): number[] }).pids().flatMap((pid) => {
      try {
        if (fs.readlinkSync(`/proc/${pid}/ns/user`) === hostNs) return []
        return [Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^Uid:\s+(\d+)/m)?.[1])]
      } catch {
        return [] // exited meanwhile
      }
    })
    assert.ok(uids.includes(base), `the sandbox's root is host uid ${base}: ${uids.join(' ')}`)
    assert.deepEqual(uids.filter((u) => u !== base && u !== (sb as unknown as { uid: number }).uid), [], 'no other host uid runs inside')
    // Brought back, it takes the range its layer is owned from: its files keep their owners inside.
    await sb.destroy()
    const again = await provider.create({ id: 'rootA', existing: true, workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 256 * MiB, pids: 128, cpus: 1 }, image: { ref: minimal } })
    live.push(again)
    assert.equal((await sh(again, 'busybox stat -c "%u:%g" /opt-f; busybox cat /srv/hello')).out, '1000:1001\nchanged\n')
  })

  it("owns /workspace inside, while the workspace stays its uid's on the host", async () => {
    const sb = await create('rootW')
    await sb.writeFile('given.txt', Buffer.from('given\n'))
    const r = await sh(sb, 'busybox stat -c %u /workspace /workspace/given.txt && echo made > /workspace/made.txt && busybox stat -c %u /workspace/made.txt')
    assert.equal(r.code, 0, r.err)
    assert.equal(r.out, '0\n0\n0\n')
    const owner = (sb as unknown as { uid: number }).uid
    assert.equal(fs.statSync(path.join(dataDir, 'root-workspaces', 'rootW', 'made.txt')).uid, owner)
    assert.equal((await provider.workspace('rootW').readFile('made.txt'))?.toString(), 'made\n')
  })

  it('keeps the walls: no_new_privs, the filter, no user namespace or mount, at most the listed capabilities', async () => {
    const sb = await create('rootWalls')
    const status = (await sh(sb, 'busybox cat /proc/self/status')).out
    assert.equal(field(status, 'NoNewPrivs'), '1')
    assert.equal(field(status, 'Seccomp'), '2')
    // CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4, KILL 5, SETGID 6, SETUID 7, SETPCAP 8, NET_BIND_SERVICE 10, SYS_CHROOT 18, SETFCAP 31.
    const want = [0, 1, 3, 4, 5, 6, 7, 8, 10, 18, 31].reduce((m, b) => m | (1n << BigInt(b)), 0n)
    assert.equal(BigInt(`0x${field(status, 'CapEff')}`), want, 'effective capabilities')
    assert.equal(BigInt(`0x${field(status, 'CapBnd')}`), want, 'bounding set')
    // A spawned process (an MCP server, the browser) enters the same way.
    const proc = await sb.spawn({ command: 'busybox id -u; busybox grep -E "^(CapEff|NoNewPrivs|Seccomp)" /proc/self/status' })
    let out = ''
    proc.stdout.on('data', (b: Buffer) => (out += b.toString()))
    proc.stderr.resume()
    proc.stdin.end()
    assert.equal(await proc.exited, 0)
    assert.equal(out.split('\n')[0], '0')
    assert.equal(BigInt(`0x${field(out, 'CapEff')}`), want, 'a spawned process holds no more')
    assert.equal(field(out, 'NoNewPrivs'), '1')
    assert.equal(field(out, 'Seccomp'), '2')
    assert.notEqual((await sh(sb, 'busybox unshare -U -r true')).code, 0, 'a user namespace of its own was made')
    // Beside the filter: its user namespace may hold none (what bubblewrap's --disable-userns does).
    assert.equal((await sh(sb, 'busybox cat /proc/sys/user/max_user_namespaces')).out, '0\n')
    assert.notEqual((await sh(sb, 'busybox mount -t tmpfs none /mnt')).code, 0, 'mounted a file system')
    // Each command in an exec group of the sandbox's cgroup: past the first, through a shell the
    // entry parked inside, which joined the group itself (no host shell before it). Not each in a
    // group of a new name: one a finished command emptied is given to the next shell parked.
    for (let i = 0; i < 3; i++) {
      const lines = (await sh(sb, 'busybox cat /proc/self/cgroup')).out.split('\n')
      const group = lines.map((l) => l.match(new RegExp(`/t${run}-root-rootWalls/(exec-\\d+)$`))?.[1]).find((g) => g !== undefined)
      assert.ok(group, `a command outside the sandbox's exec groups: ${lines.join(' ')}`)
    }
    const hostPath = await sh(sb, `[ ! -e '${process.execPath}' ] && [ ! -e '${dataDir}' ]`)
    assert.equal(hostPath.code, 0, 'a host path is seen inside')
  })
})

describe('root ranges on a host without cgroups', { skip }, () => {
  it("start-up clean-up kills what runs as a range's uids but a live sandbox's", async () => {
    const registry = await startRegistry()
    const uidBase = 300_000 + (randomBytes(2).readUInt16BE() % 600) * 100
    const provider = new LocalSandboxProvider({
      cgroups: false,
      workspaceRoot: path.join(dataDir, 'nocg-workspaces'),
      prefix: `t${run}-nocg-`,
      uidBase,
      uidCount: 4,
      rootRanges: 2,
      images: imagePuller({ dir: path.join(dataDir, 'nocg-images'), registry: { allowPrivate: ['127.0.0.1/32'] } }),
    })
    const strays: ReturnType<typeof spawn>[] = []
    try {
      await pushMinimalImage(registry, 'warren/minimal', '1')
      const sb = await provider.create({ id: 'nocg', workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 256 * MiB, pids: 128, cpus: 1 }, image: { ref: `${registry.host}/warren/minimal:1` } })
      const bg = await sb.exec({ command: 'busybox sleep 1000 >/dev/null 2>&1 & echo $!' })
      assert.equal(bg.exitCode, 0, bg.stderr.toString())
      // A leftover of a crashed run: a process as a uid of the other range.
      const stray = spawn('sleep', ['1000'], { uid: uidBase + 4 + 65_536 + 7, gid: uidBase + 4 + 65_536 + 7, stdio: 'ignore' })
      strays.push(stray)
      const gone = new Promise<boolean>((r) => stray.once('exit', () => r(true)))
      await provider.cleanupOrphans()
      // Killed by the clean-up itself, before it resolved: its exit is on its way, not a matter of time.
      const waited = await Promise.race([gone, new Promise<boolean>((r) => setTimeout(() => r(false), 10_000).unref())])
      assert.ok(waited, 'the stray of a root range was left running')
      assert.equal((await sb.exec({ command: `busybox kill -0 ${bg.stdout.toString().trim()} && echo alive` })).stdout.toString(), 'alive\n', "the live sandbox's process was kept")
      await sb.destroy()
    } finally {
      for (const s of strays) s.kill('SIGKILL')
      await provider.close()
      await registry.stop()
    }
  })
})

