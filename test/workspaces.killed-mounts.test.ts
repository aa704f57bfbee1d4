// A service killed outright (SIGKILL, nothing of its own shutdown run) with a workspace's file
// system mounted: the next start on the same data folder and prefix takes on what it left (the
// workspace mounted, a loop device behind it), uses it, and a graceful stop then leaves nothing
// of the data folder mounted and no loop device over its images.
//
// SQLite only: the mounts are the node's, whatever its store.
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { startModelServer, type FakeModelServer } from './fakes/model-server.ts'
import { waitFor } from './fixtures.ts'
import { leftOnHost, removeDataDir } from './left-on-host.ts'
import { serviceProcess } from './service-process.ts'

const skip =
  process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap && command -v mke2fs && command -v losetup']).status !== 0 ? 'needs bubblewrap, mke2fs and losetup (scripts/setup.sh)' : false

/** Mount points at or under `dir`, as this mount namespace sees them. */
function mountsUnder(dir: string): string[] {
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((p): p is string => p !== undefined && (p === dir || p.startsWith(`${dir}/`)))
}

/** Loop devices whose backing file lies under `dir` (a deleted image included). */
function loopsOver(dir: string): string[] {
  return execFileSync('losetup', ['--list', '--noheadings', '--output', 'NAME,BACK-FILE'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes(`${dir}/`))
}

describe('a service killed with workspaces mounted (child process)', { skip }, () => {
  const prefix = 'k' + Array.from(randomBytes(4), (b) => 'abcdefghijklmnopqrstuvwxyz0123456789'[b % 36]).join('')
  const dataDir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'warren-killed-')))
  const service = serviceProcess({ WARREN_DATA_DIR: dataDir, WARREN_SANDBOX_PREFIX: prefix, WARREN_WORKSPACE_DISK_MB: '16', WARREN_LOG_LEVEL: 'warn', WARREN_RATE_GENERAL_PER_MIN: '100000' })
  const workspaces = path.join(dataDir, 'workspaces')
  let fake: FakeModelServer
  before(async () => {
    fake = await startModelServer({ models: ['m1'] })
  })

  after(async () => {
    await fake?.close()
    try {
      if (!service.running && leftOnHost(prefix).length > 0) await service.start().catch(() => {})
      if (service.running) await service.stop('SIGTERM').catch(() => {})
    } finally {
      if (service.running) await service.stop('SIGKILL').catch(() => {})
      removeDataDir(dataDir)
    }
  })

  const upload = async (id: string, name: string) => {
    const r = await service.api('POST', `/v1/sessions/${id}/files`, { files: [{ path: name, content: Buffer.from(name).toString('base64') }] })
    assert.equal(r.status, 200, r.text)
  }

  it('the next start takes on its mounts and loop devices, a graceful stop leaves none, and the workspace is as it was', { timeout: 300_000 }, async () => {
    service.token = await service.mint('killed-test')
    await service.start()
    const mc = await service.api('POST', '/v1/model-credentials', { provider: 'openai', api_key: fake.key, base_url: fake.url, models: ['m1'] })
    assert.equal(mc.status, 201, mc.text)
    const created = await service.api('POST', '/v1/sessions', {})
    assert.equal(created.status, 201, created.text)
    const id = created.body.id as string
    await upload(id, 'before.txt')
    const mounted = await waitFor('the workspace mounted', async () => mountsUnder(workspaces).filter((p) => p !== workspaces).length > 0)
    assert.ok(mounted)
    assert.notEqual(loopsOver(dataDir).length, 0, 'control: a loop device backs the workspace')

    // Killed outright: nothing of its own close runs, and what it mounted stays.
    await service.stop('SIGKILL')
    assert.notEqual(mountsUnder(workspaces).filter((p) => p !== workspaces).length, 0, 'control: the killed service left its workspace mounted')

    // Started and stopped without the workspace being used: what the killed one left is taken on
    // at start (not only when a request mounts the workspace again) and let go at the stop.
    const clean = async (when: string) => {
      const exit = await service.stop('SIGTERM', 120_000)
      assert.deepEqual(exit, { code: 0, signal: null }, `the service ended on its own:\n${service.output.join('\n')}`)
      assert.deepEqual(mountsUnder(dataDir), [], `nothing of the data folder is mounted ${when}`)
      // A lazily detached loop device goes once its last user has: waited for, never timed.
      await waitFor('the loop devices detached', async () => loopsOver(dataDir).length === 0, 30_000).catch(() => assert.deepEqual(loopsOver(dataDir), [], when))
      assert.deepEqual(leftOnHost(prefix), [], `nothing of the prefix is left on the host ${when}`)
    }
    await service.start()
    await clean('after a start and a stop that follow the kill')

    // The workspace it left is used as it was.
    await service.start()
    await upload(id, 'after.txt')
    await clean('after the workspace was used again')

    // What the killed service wrote and what the next one wrote are both in the workspace's image.
    const images = fs.readdirSync(path.join(workspaces, '.disks')).filter((f) => f.endsWith('.ext4') && !f.startsWith('.'))
    assert.equal(images.length, 1, images.join(', '))
    const root = execFileSync('debugfs', ['-R', 'ls -p /', path.join(workspaces, '.disks', images[0]!)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
    const names = root.split('\n').map((l) => l.split('/')[5]).filter((n) => n && n !== '.' && n !== '..')
    assert.deepEqual(names.sort(), ['after.txt', 'before.txt'])
  })
})
