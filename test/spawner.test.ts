import { after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawnDetached, type SpawnedProcess } from '../src/sandbox/local/spawner.ts'
import { filterWrap } from '../src/sandbox/local/seccomp.ts'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'

// The sandboxes' processes are started by a spawner process, their pipes passed back: these
// check that nothing is lost on the way (no byte, no exit), and that its death is survived.
const root = process.getuid?.() === 0
const skip = !root ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap']).status !== 0 ? 'needs bubblewrap' : false
const ENV = { PATH: '/usr/bin:/bin' }
const uid = process.getuid?.() ?? 0
const gid = process.getgid?.() ?? 0

const exited = (p: SpawnedProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    if (p.exitCode !== null || p.signalCode !== null) return resolve({ code: p.exitCode, signal: p.signalCode })
    p.once('exit', (code, signal) => resolve({ code, signal }))
  })
const readAll = (s: NodeJS.ReadableStream) =>
  new Promise<string>((resolve) => {
    let text = ''
    s.on('data', (b: Buffer) => (text += b.toString('utf8')))
    s.on('end', () => resolve(text))
  })
/** The pid of this process's spawner: the parent of what it starts. */
const parentOf = (pid: number) => Number(fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1])

describe('the spawner', { skip: !root && 'needs root' }, () => {
  it('passes the pipes back unread: every byte a process writes at once arrives, stdin reaches it, its exit is told', async () => {
    // A process that writes before anyone could read: a byte read by the spawner would be lost.
    for (let i = 0; i < 30; i++) {
      const p = spawnDetached('/bin/sh', ['-c', `printf 'early%s' ${i}; printf E >&2; read x; printf "$x" >&3; exit 7`], { env: ENV, pipes: 4, uid, gid })
      await p.opened
      const [out, err, extra] = [readAll(p.stdout!), readAll(p.stderr!), readAll(p.stdio[3]!)]
      p.stdin!.end(`in${i}\n`)
      assert.deepEqual(await exited(p), { code: 7, signal: null })
      assert.deepEqual(await Promise.all([out, err, extra]), [`early${i}`, 'E', `in${i}`])
    }
  })

  it('passes the pipes of a process that exits at once: its output and its exit, nothing held', async () => {
    // Every other one prints nothing: an empty pipe that ends before its user has it must still end for them.
    for (let i = 0; i < 40; i++) {
      const silent = i % 2 === 1
      const p = spawnDetached('/bin/sh', ['-c', silent ? `exit ${i % 4}` : `printf 'out%s' ${i}; printf err >&2; exit ${i % 4}`], { env: ENV, pipes: 3, uid, gid })
      await p.opened
      const [out, err] = [readAll(p.stdout!), readAll(p.stderr!)]
      p.stdin!.on('error', () => {})
      p.stdin!.end()
      assert.deepEqual(await exited(p), { code: i % 4, signal: null })
      assert.deepEqual(await Promise.all([out, err]), silent ? ['', ''] : [`out${i}`, 'err'])
    }
  })

  it('holds no pipe of an exited process, read or not', async () => {
    const open = () => fs.readdirSync('/proc/self/fd').length
    const warm = spawnDetached('/bin/true', [], { env: ENV, pipes: 3, uid, gid })
    await exited(warm)
    const before = open()
    for (let i = 0; i < 40; i++) {
      // Its stdin written and ended, its output never read: as a parked shell let go, or a command's stdin.
      const p = spawnDetached('/bin/sh', ['-c', 'cat > /dev/null; echo unread; echo unread >&2'], { env: ENV, pipes: 4, uid, gid })
      await p.opened
      p.stdin!.end('input\n')
      await exited(p)
    }
    // Closing follows the exit by a tick or so.
    await waitFor(() => open() <= before + 4)
  })

  it('starts processes from its own process, not by forking this one', async () => {
    const p = spawnDetached('/bin/sleep', ['30'], { env: ENV, pipes: 3, uid, gid })
    await p.opened
    const parent = parentOf(p.pid!)
    assert.notEqual(parent, process.pid)
    assert.equal(parentOf(parent), process.pid, 'the spawner is this process’s child')
    assert.equal(p.kill('SIGKILL'), true)
    assert.deepEqual(await exited(p), { code: null, signal: 'SIGKILL' })
    assert.equal(p.kill('SIGKILL'), false, 'an exited process is not signalled again')
  })

  it('reports a program that cannot start as an error, not a hang', async () => {
    const p = spawnDetached('/nonexistent/program', [], { env: ENV, pipes: 3, uid, gid })
    const err = await new Promise<Error>((resolve) => p.once('error', resolve))
    assert.match(err.message, /ENOENT/)
    await assert.rejects(p.opened)
    assert.equal(p.exitCode, -1, 'as a ChildProcess that could not spawn')
    // Nor does the spawner keep the pipes it made for it (a missing `nft`, on every network build).
    const spawner = spawnerPids()[0]!
    const held = () => fs.readdirSync(`/proc/${spawner}/fd`).length
    const before = held()
    for (let i = 0; i < 30; i++) await new Promise((resolve) => spawnDetached('/nonexistent/program', [], { env: ENV, pipes: 3, uid, gid }).once('error', resolve))
    await waitFor(() => held() <= before + 2)
  })

  it('a spawner started under a prefix (the entry filter) passes it on to all it starts, and its successor is started under it too', async () => {
    const under = filterWrap(spawnSync('sh', ['-c', 'command -v perl'], { encoding: 'utf8' }).stdout.trim())
    const status = async (o: { under?: string[] }) => {
      // It waits for its input, so that its parent is still to be found.
      const p = spawnDetached('/bin/sh', ['-c', 'read x; cat /proc/self/status'], { env: ENV, pipes: 3, uid, gid, ...o })
      await p.opened
      const spawner = parentOf(p.pid!)
      p.stdin!.end('\n')
      const text = await readAll(p.stdout!)
      await exited(p)
      return { spawner, seccomp: text.match(/^Seccomp:\s*(\d)/m)?.[1], nnp: text.match(/^NoNewPrivs:\s*(\d)/m)?.[1] }
    }
    const first = await status({ under })
    assert.deepEqual([first.seccomp, first.nnp], ['2', '1'], 'started under the filter')
    const plain = await status({})
    assert.deepEqual([plain.seccomp, plain.nnp], ['0', '0'], 'a start without the prefix: another spawner, unfiltered')
    assert.notEqual(plain.spawner, first.spawner)
    process.kill(first.spawner, 'SIGKILL')
    await waitFor(() => !alive(first.spawner))
    const again = await status({ under })
    assert.notEqual(again.spawner, first.spawner, 'a new spawner')
    assert.deepEqual([again.seccomp, again.nnp], ['2', '1'], 'the new spawner is under the filter too')
  })

  it('when the spawner is killed, its processes are killed and told so, and the next start gets a new spawner', async () => {
    const p = spawnDetached('/bin/sleep', ['30'], { env: ENV, pipes: 3, uid, gid })
    await p.opened
    const spawner = parentOf(p.pid!)
    process.kill(spawner, 'SIGKILL')
    assert.deepEqual(await exited(p), { code: null, signal: 'SIGKILL' })
    // Killed, not left running without anyone to wait for it.
    await waitFor(() => !alive(p.pid!))
    const q = spawnDetached('/bin/sh', ['-c', 'read x; echo again'], { env: ENV, pipes: 3, uid, gid })
    await q.opened
    assert.notEqual(parentOf(q.pid!), spawner)
    q.stdin!.end('\n')
    assert.equal(await readAll(q.stdout!), 'again\n')
    assert.deepEqual(await exited(q), { code: 0, signal: null })
  })
})

describe('a spawner whose service died', { skip: !root && 'needs root' }, () => {
  it('ends, even with a pipe still on its way, and what it started reads its end', async () => {
    // A service stand-in asks for a process and then never reads its channel again (a loop that
    // never yields), so the spawner's handles wait for a receipt; then it is killed outright.
    const code = `
      import fs from 'node:fs'
      const { spawnDetached } = await import(${JSON.stringify(path.resolve(import.meta.dirname, '../src/sandbox/local/spawner.ts'))})
      spawnDetached('/bin/sh', ['-c', 'read x; sleep 30'], { env: { PATH: '/usr/bin:/bin' }, pipes: 3, uid: 0, gid: 0 })
      fs.writeSync(1, 'asked\\n')
      for (;;) {}`
    const standIn = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] })
    let said = ''
    standIn.stdout.on('data', (c) => (said += c))
    await waitFor(() => said.includes('asked'))
    const spawner = Number(spawnSync('pgrep', ['-P', String(standIn.pid), '-f', 'spawner-process.ts'], { encoding: 'utf8' }).stdout.trim())
    assert.ok(spawner > 0, 'the stand-in has a spawner')
    let started = 0
    await waitFor(() => (started = Number(spawnSync('pgrep', ['-P', String(spawner), '-x', 'sh'], { encoding: 'utf8' }).stdout.trim() || 0)) > 0)
    standIn.kill('SIGKILL')
    try {
      await waitFor(() => !alive(spawner))
      // Its stdin's other end closed with the spawner: `read` returned and it went on to sleep.
      await waitFor(() => spawnSync('pgrep', ['-P', String(started), '-x', 'sleep']).status === 0)
    } finally {
      for (const pid of [spawner, -started]) {
        try {
          process.kill(pid, 'SIGKILL')
        } catch {
          /* gone, as it should be */
        }
      }
    }
  })
})

describe('a sandbox whose spawner died', { skip }, () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-spawner-test-'))
  fs.chmodSync(dataDir, 0o700)
  const provider = new LocalSandboxProvider({
    cgroupParent: 'warren-test',
    workspaceRoot: dataDir,
    prefix: `t${randomBytes(3).toString('hex')}-spw-`,
    uidBase: 310_000 + (randomBytes(2).readUInt16BE() % 600) * 100,
    uidCount: 20,
  })
  after(async () => {
    await provider.close()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  it('runs commands again: its parked shell is replaced, its init started again, its workspace kept', async () => {
    const sb = await provider.create({ id: 'spw', workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 256 * 1024 * 1024, pids: 128, cpus: 1 } })
    try {
      const first = await sb.exec({ command: 'echo one > f.txt; cat f.txt' })
      assert.equal(first.stdout.toString(), 'one\n')
      for (const pid of spawnerPids()) process.kill(pid, 'SIGKILL')
      // A command sent before the service noticed the death may find the init dying (as after an
      // OOM kill of it): it fails without running. One of the next few runs on a new init.
      let read = await sb.exec({ command: 'cat f.txt' })
      for (let i = 0; i < 20 && read.exitCode !== 0; i++) {
        await new Promise((r) => setTimeout(r, 50))
        read = await sb.exec({ command: 'cat f.txt' })
      }
      assert.equal(read.stdout.toString(), 'one\n', read.stderr.toString())
      const next = await sb.exec({ command: 'echo two >> f.txt; cat f.txt' })
      assert.equal(next.exitCode, 0, next.stderr.toString())
      assert.equal(next.stdout.toString(), 'one\ntwo\n', 'the workspace is the same')
    } finally {
      await sb.destroy()
    }
  })
})

/** This process's spawners (its children running spawner-process.ts). */
function spawnerPids(): number[] {
  const r = spawnSync('pgrep', ['-P', String(process.pid), '-f', 'spawner-process.ts'], { encoding: 'utf8' })
  return r.stdout.split('\n').filter(Boolean).map(Number)
}

function alive(pid: number): boolean {
  try {
    const state = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]![0]
    return state !== 'Z' && state !== 'X'
  } catch {
    return false
  }
}

async function waitFor(ok: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !ok(); i++) await new Promise((r) => setTimeout(r, 10))
  assert.ok(ok())
}
