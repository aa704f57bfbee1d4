// Sandboxes on a freshly booted host, where /run/netns is not yet a shared mount: shells parked in
// mount namespaces of their own before it becomes one never see the namespaces made later.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { execFile, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { NODE, ROOT } from './service-process.ts'

const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0
const skip = process.getuid?.() !== 0 ? 'needs root' : !['bwrap', 'ip', 'nft', 'unshare'].every(has) ? 'needs bwrap, ip, nft and unshare' : false
if (skip) console.log(`# skipped: ${skip}`)

/**
 * Runs the stack (test/fixtures/sandbox-stack.ts) in a private mount namespace where `boot`
 * recreates a fresh boot's /run whatever this host's looks like; returns one result per sandbox.
 */
async function stackAfterBoot(boot: string): Promise<Array<{ id: string; stdout?: string; error?: string }>> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-boot-'))
  const prefix = `f${randomBytes(4).readUInt32BE().toString(36).slice(0, 4)}`
  const uidBase = String(300_000 + (randomBytes(2).readUInt16BE() % 600) * 1000)
  const script = `${boot} && exec "$@"`
  const argv = ['--mount', '--propagation', 'private', '--', 'sh', '-c', script, 'sh', NODE, 'test/fixtures/sandbox-stack.ts', prefix, uidBase, dataDir, '3']
  try {
    const out = await new Promise<string>((resolve, reject) =>
      execFile('unshare', argv, { cwd: ROOT, timeout: 90_000 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout))),
    )
    return out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}

const allRan = (results: Array<{ id: string; stdout?: string; error?: string }>) =>
  assert.deepEqual(results, ['boot-0', 'boot-1', 'boot-2'].map((id) => ({ id, stdout: 'ok', exitCode: 0 })))

it('the first sandboxes after a boot run when /run/netns does not exist yet', { skip }, async () => {
  // A tmpfs over /run: no /run/netns at all, as on a host no `ip netns add` has touched since boot.
  allRan(await stackAfterBoot('mount -t tmpfs -o mode=0755 warren-boot /run'))
})

it('the first sandboxes after a boot run when /run/netns is a mount that is not shared', { skip }, async () => {
  allRan(await stackAfterBoot('mkdir -p /run/netns && mount -t tmpfs -o mode=0755 warren-boot /run/netns && mount --make-private /run/netns'))
})
