// Run as a process of its own by sandbox.inherited-fds.test.ts, started with a pipe on fd 200
// and no close-on-exec on it (as a supervisor may leave one): a sandbox made here runs a command
// and a spawned process, each printing the descriptors it holds, then the sandbox's init's.
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { LocalSandboxProvider } from '../../src/sandbox/local/local-provider.ts'

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-inherited-fds-'))
fs.chmodSync(dataDir, 0o700)
const provider = new LocalSandboxProvider({
  cgroupParent: 'warren-test',
  workspaceRoot: dataDir,
  prefix: `t${randomBytes(3).toString('hex')}-fds-`,
  uidBase: 300_000 + (randomBytes(2).readUInt16BE() % 600) * 100,
  uidCount: 20,
})
const fds = (pid: string | number) => `echo $(ls /proc/${pid}/fd | sort -n)`
try {
  const sb = await provider.create({ id: 'fds', workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 512 * 1024 * 1024, pids: 256, cpus: 1 } })
  process.stdout.write(`command: ${(await sb.exec({ command: fds('$$') })).stdout.toString()}`)
  const proc = await sb.spawn({ command: fds('$$') })
  let out = ''
  proc.stdout.on('data', (b: Buffer) => (out += b.toString()))
  proc.stdin.end()
  await proc.exited
  process.stdout.write(`spawned: ${out}`)
  process.stdout.write(`init: ${(await sb.exec({ command: `${fds(1)}; ${fds(2)}` })).stdout.toString().replace('\n', ' / ')}`)
  await sb.destroy()
} finally {
  await provider.close()
  fs.rmSync(dataDir, { recursive: true, force: true })
}
