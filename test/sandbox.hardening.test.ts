import { after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Sandbox, SandboxProcess, SandboxSpec } from '../src/sandbox/sandbox.ts'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'

/**
 * What the kernel lets a workspace process do, probed from inside real sandboxes: commands (the
 * bash tool and template setup run through exec) and long-lived processes (MCP stdio servers and
 * the browser run through spawn).
 */

const skip = process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap']).status !== 0 ? 'needs bubblewrap' : false
const run = randomBytes(3).toString('hex')
const MiB = 1024 * 1024

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-hardening-test-'))
fs.chmodSync(dataDir, 0o700)
after(() => fs.rmSync(dataDir, { recursive: true, force: true }))

const spec = (id: string): SandboxSpec => ({
  id,
  workspaceDir: path.join(dataDir, id),
  workspaceMount: '/workspace',
  env: {},
  network: { allow: [] },
  limits: { memoryBytes: 512 * MiB, pids: 256, cpus: 1 },
})

/** Everything a spawned process writes to stdout until it exits. */
async function output(proc: SandboxProcess): Promise<{ code: number | null; out: string }> {
  let out = ''
  proc.stdout.on('data', (b: Buffer) => (out += b.toString('utf8')))
  proc.stderr.on('data', () => {})
  proc.stdin.end()
  const code = await proc.exited
  return { code, out }
}

/** The value of one field of /proc/self/status, as seen by whoever printed the file. */
const field = (status: string, name: string) => status.match(new RegExp(`^${name}:\\s*(\\S+)`, 'm'))?.[1]

describe('workspace processes and the kernel', { skip }, () => {
  const provider = new LocalSandboxProvider({
    cgroupParent: 'warren-test',
    prefix: `t${run}-hard-`,
    uidBase: 300_000 + (randomBytes(2).readUInt16BE() % 600) * 100,
    uidCount: 20,
  })
  let sb: Sandbox
  after(async () => {
    await sb?.destroy()
    await provider.close()
  })

  it('runs commands and spawned processes with no_new_privs', async () => {
    sb = await provider.create(spec('nnp'))
    // Twice: the first command may run on a shell parked at create, the second on a refill.
    for (let i = 0; i < 2; i++) {
      const r = await sb.exec({ command: 'cat /proc/self/status' })
      assert.equal(r.exitCode, 0, r.stderr.toString())
      assert.equal(field(r.stdout.toString(), 'NoNewPrivs'), '1', `command ${i + 1}`)
    }
    const spawned = await output(await sb.spawn({ command: 'cat /proc/self/status' }))
    assert.equal(spawned.code, 0)
    assert.equal(field(spawned.out, 'NoNewPrivs'), '1', 'a spawned process (MCP server, browser)')
    // And what they start inherits it: a background process found from a later command.
    await sb.exec({ command: '(setsid sleep 30 >/dev/null 2>&1 &)' })
    const bg = await sb.exec({ command: 'for p in $(pgrep -x sleep); do grep NoNewPrivs /proc/$p/status; done | sort -u' })
    assert.equal(bg.stdout.toString().trim().split('\n').map((l) => l.split(/\s+/)[1]).join(','), '1')
  })
})
