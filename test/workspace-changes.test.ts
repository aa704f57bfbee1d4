import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { SandboxProvider, SandboxSpec, WorkspaceSnapshot } from '../src/sandbox/sandbox.ts'
import type { LocalSandbox } from '../src/sandbox/local/local-sandbox.ts'
import { createLocalProvider } from '../src/sandbox/local/create-local.ts'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'
import { snapshotWorkspace } from '../src/sandbox/local/workspace-walk.ts'
import { removeLeftFences } from '../src/sandbox/local/workspace-watch.ts'
import { builtinTool, type ToolContext, type ToolOutcome } from '../src/tools/builtin/index.ts'
import { compareSnapshots } from '../src/tools/builtin/compare-snapshots.ts'
import { waitFor } from './fixtures.ts'

/**
 * What a bash call reports as changed in a large workspace (20,000 files), found through the
 * workspace's watcher rather than by walking it: exactly what comparing two full snapshots around
 * the call says, whoever wrote (the command, a process it left running), with the watcher working,
 * lost, or overflowed; and the watcher goes with the sandbox.
 */

const skip =
  process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap']).status !== 0 ? 'needs bubblewrap' : spawnSync('sh', ['-c', 'command -v inotifywait']).status !== 0 ? 'needs inotifywait (scripts/setup.sh)' : false

const alive = (pid: number) => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat[stat.lastIndexOf(')') + 2] !== 'Z'
  } catch {
    return false
  }
}

/** inotifywait processes watching a folder (by their command line). */
const watchersOf = (dir: string) =>
  fs.readdirSync('/proc').filter((p) => {
    if (!/^\d+$/.test(p)) return false
    try {
      const argv = fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0')
      return argv[0]?.endsWith('inotifywait') && argv.includes(dir) && alive(Number(p))
    } catch {
      return false
    }
  })

describe('changes in a large workspace, without walking it', { skip }, () => {
  const MiB = 1024 * 1024
  let dataDir: string
  let workspaceDir: string
  let provider: SandboxProvider
  let sandbox: LocalSandbox

  const spec = (existing = false) => ({ id: 'big', existing, workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 256 * MiB, pids: 128, cpus: 1 } })

  before(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-changes-test-'))
    fs.chmodSync(dataDir, 0o700)
    workspaceDir = path.join(dataDir, 'big')
    provider = await createLocalProvider({ workspaceRoot: dataDir, prefix: `c${randomBytes(2).toString('hex')}`, uidBase: 300_000 + Math.floor(Math.random() * 600) * 1000, uidCount: 1000 })
    sandbox = (await provider.create(spec())) as LocalSandbox
    const made = await sandbox.exec({
      command:
        'for d in $(seq 0 199); do mkdir -p big/d$d; for f in $(seq 0 99); do echo "$d $f" > big/d$d/f$f.txt; done; done; ' +
        'mkdir -p src pkg/sub .git node_modules/p; printf "one\\ntwo\\n" > src/a.txt; echo b > src/b.txt; echo c > src/c.txt; ' +
        'echo m > mv-src.txt; echo l > tolink.txt; echo x > pkg/x.txt; echo y > pkg/sub/y.txt; echo h > .git/HEAD; echo i > node_modules/p/i.js',
      timeoutMs: 300_000,
    })
    assert.equal(made.exitCode, 0, made.stderr.toString())
  })
  after(async () => {
    await sandbox?.destroy().catch(() => {})
    await provider?.close()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  const context = (over: Partial<ToolContext> = {}): ToolContext => ({ sandbox, mount: '/workspace', signal: new AbortController().signal, seen: new Map(), ...over })
  const bash = (command: string, ctx = context()): Promise<ToolOutcome> => builtinTool('bash')!.run({ command }, ctx)
  const host = (rel: string) => path.join(workspaceDir, rel)
  const kinds = (r: ToolOutcome) => (r.changes ?? []).map(({ path, kind }) => ({ path, kind }))
  /** What comparing two full snapshots says: the behaviour the watcher must reproduce exactly. */
  const truth = (before: WorkspaceSnapshot, after: WorkspaceSnapshot) => compareSnapshots(before, after)
  /** Runs `command` between two full snapshots: what it reports must be what they say changed. */
  const bashAgainstTruth = async (command: string): Promise<ToolOutcome> => {
    const before = await snapshotWorkspace(workspaceDir)
    const r = await bash(command)
    assert.deepEqual(kinds(r), truth(before, await snapshotWorkspace(workspaceDir)))
    return r
  }

  it('reports created (in new folders), modified, deleted, renamed and replaced-by-a-link files exactly, with diffs, leaving out what is below .git and node_modules', async () => {
    await bash('true') // the watcher is up and the tree known: what follows is the steady state
    const watcher = sandbox.watcherPid
    assert.ok(watcher && alive(watcher))
    const ctx = context({ seen: new Map([['src/a.txt', 'one\ntwo\n']]) })
    const before = await snapshotWorkspace(workspaceDir)
    const r = await bash(
      'echo three >> src/a.txt; rm src/b.txt; mkdir -p new/deep && echo hi > new/deep/n.txt; mkdir moved && mv mv-src.txt moved/m.txt; ' +
        'rm tolink.txt && ln -s /etc/passwd tolink.txt; ln -s /etc outlink; mv pkg pkg2; echo z > big/d7/f3.txt; ' +
        'echo g > .git/objects; echo j > node_modules/p/j.js; touch -d 2001-01-01 big/d9/f9.txt; mkdir -p wt/node_modules && echo gitdir: x > wt/.git && echo k > wt/node_modules/k.js',
      ctx,
    )
    assert.equal(r.isError, false, r.output)
    const after = await snapshotWorkspace(workspaceDir)
    assert.deepEqual(kinds(r), [
      { path: 'big/d7/f3.txt', kind: 'modified' },
      { path: 'big/d9/f9.txt', kind: 'modified' },
      { path: 'moved/m.txt', kind: 'created' },
      { path: 'mv-src.txt', kind: 'deleted' },
      { path: 'new/deep/n.txt', kind: 'created' },
      { path: 'pkg/sub/y.txt', kind: 'deleted' },
      { path: 'pkg/x.txt', kind: 'deleted' },
      { path: 'pkg2/sub/y.txt', kind: 'created' },
      { path: 'pkg2/x.txt', kind: 'created' },
      { path: 'src/a.txt', kind: 'modified' },
      { path: 'src/b.txt', kind: 'deleted' },
      { path: 'tolink.txt', kind: 'deleted' },
      { path: 'wt/.git', kind: 'created' },
    ])
    assert.deepEqual(kinds(r), truth(before, after))
    const diffs = Object.fromEntries((r.changes ?? []).filter((c) => c.diff).map((c) => [c.path, c.diff]))
    assert.equal(diffs['src/a.txt'], '--- a/src/a.txt\n+++ b/src/a.txt\n@@ -1,2 +1,3 @@\n one\n two\n+three\n')
    assert.equal(diffs['new/deep/n.txt'], '--- /dev/null\n+++ b/new/deep/n.txt\n@@ -0,0 +1,1 @@\n+hi\n')
    assert.equal(diffs['big/d7/f3.txt'], undefined, 'a file the turn never read has no earlier text to diff against')
    assert.equal(sandbox.watcherPid, watcher, 'the same watcher served it: no fallback walk')
  })

  it('reports changes in folders made with their parent (`mkdir -p`), which the watcher may have left unwatched', async () => {
    // inotifywait watches a new folder only after scanning it: a sibling made in between is never
    // watched. Ten tries: the race is lost more often than not.
    for (let i = 0; i < 10; i++) {
      const made = await bash(`mkdir -p nest${i}/a nest${i}/b/c; echo 1 > nest${i}/b/c/f.txt`)
      assert.deepEqual(kinds(made), [{ path: `nest${i}/b/c/f.txt`, kind: 'created' }])
      const r = await bashAgainstTruth(`echo 2 >> nest${i}/b/c/f.txt; echo 3 > nest${i}/b/new.txt; mkdir nest${i}/b/c/d; echo 4 > nest${i}/b/c/d/g.txt`)
      assert.deepEqual(
        kinds(r),
        [
          { path: `nest${i}/b/c/d/g.txt`, kind: 'created' },
          { path: `nest${i}/b/c/f.txt`, kind: 'modified' },
          { path: `nest${i}/b/new.txt`, kind: 'created' },
        ],
        `try ${i}`,
      )
    }
  })

  it('reports a write through one hard link as a change of every link, in whichever folder', async () => {
    const made = await bash('mkdir -p hl/a hl/b; echo one > hl/a/f.txt; ln hl/a/f.txt hl/b/g.txt; ln hl/a/f.txt hl/h.txt')
    assert.deepEqual(kinds(made), [
      { path: 'hl/a/f.txt', kind: 'created' },
      { path: 'hl/b/g.txt', kind: 'created' },
      { path: 'hl/h.txt', kind: 'created' },
    ])
    const r = await bashAgainstTruth('echo two >> hl/b/g.txt')
    assert.deepEqual(kinds(r), [
      { path: 'hl/a/f.txt', kind: 'modified' },
      { path: 'hl/b/g.txt', kind: 'modified' },
      { path: 'hl/h.txt', kind: 'modified' },
    ])
    // A link removed is no longer found by its inode: a write through the rest names only them.
    await bash('rm hl/h.txt')
    const next = await bash('echo three >> hl/a/f.txt')
    assert.deepEqual(kinds(next), [
      { path: 'hl/a/f.txt', kind: 'modified' },
      { path: 'hl/b/g.txt', kind: 'modified' },
    ])
  })

  it('reports what a process left running writes after its command returned, during the next command', async () => {
    const left = await bash('mkdir -p bg; (while [ ! -e go ]; do sleep 0.05; done; echo late > bg/late.txt; echo more >> src/c.txt; rm bg/gone.txt; touch bg/done) >/dev/null 2>&1 & echo x > bg/gone.txt')
    assert.deepEqual(kinds(left), [{ path: 'bg/gone.txt', kind: 'created' }])
    const r = await bashAgainstTruth('touch go; while [ ! -e bg/done ]; do sleep 0.05; done')
    assert.deepEqual(kinds(r), [
      { path: 'bg/done', kind: 'created' },
      { path: 'bg/gone.txt', kind: 'deleted' },
      { path: 'bg/late.txt', kind: 'created' },
      { path: 'go', kind: 'created' },
      { path: 'src/c.txt', kind: 'modified' },
    ])
  })

  it('reports exactly when the watcher is lost mid-command: a new one starts and the tree is walked once', async () => {
    await bash('true')
    const lost = sandbox.watcherPid!
    const before = await snapshotWorkspace(workspaceDir)
    const running = bash('mkdir -p fb; echo 1 > fb/1.txt; echo a >> src/a.txt; while [ ! -e fb-go ]; do sleep 0.05; done; echo 2 > fb/2.txt; rm src/c.txt; mv big/d3 big/d3-renamed')
    await waitFor('the command to start writing', async () => fs.existsSync(host('fb/1.txt')), 60_000)
    process.kill(lost, 'SIGKILL')
    await waitFor('the watcher to die', async () => !alive(lost), 60_000)
    fs.writeFileSync(host('fb-go'), '')
    const r = await running
    const after = await snapshotWorkspace(workspaceDir)
    assert.equal(r.changes?.length, 5 + 2 * 100)
    assert.deepEqual(kinds(r), truth(before, after))
    assert.ok(kinds(r).some((c) => c.path === 'fb-go' && c.kind === 'created'))
    assert.ok(kinds(r).some((c) => c.path === 'big/d3-renamed/f42.txt' && c.kind === 'created'))
    assert.ok(kinds(r).some((c) => c.path === 'big/d3/f42.txt' && c.kind === 'deleted'))
    const next = sandbox.watcherPid
    assert.ok(next && next !== lost && alive(next), 'a new watcher runs')
    // And it works: the next call is exact again.
    const again = await bash('echo b >> src/a.txt')
    assert.deepEqual(kinds(again), [{ path: 'src/a.txt', kind: 'modified' }])
  })

  it('reports exactly when the watcher overflows (more events than its queue holds)', async () => {
    // Into a folder already watched: the events of a folder made while the watcher is stopped never come at all.
    await bash('mkdir flood')
    const stuck = sandbox.watcherPid!
    const before = await snapshotWorkspace(workspaceDir)
    // More files than the kernel queues events for one watcher (16,384 unless raised).
    const flood = Number(fs.readFileSync('/proc/sys/fs/inotify/max_queued_events', 'utf8')) + 1000
    const running = bash(`touch flood-started; while [ ! -e flood-go ]; do sleep 0.05; done; for i in $(seq 1 ${flood}); do : > flood/$i; done; echo c >> src/a.txt; touch flood-done`)
    await waitFor('the command to start', async () => fs.existsSync(host('flood-started')), 60_000)
    // Not reading its events: the kernel's queue fills and overflows.
    process.kill(stuck, 'SIGSTOP')
    try {
      fs.writeFileSync(host('flood-go'), '')
      await waitFor('the flood to be written', async () => fs.existsSync(host('flood-done')), 120_000)
    } finally {
      process.kill(stuck, 'SIGCONT')
    }
    const r = await running
    const after = await snapshotWorkspace(workspaceDir)
    assert.equal(r.changes?.length, flood + 4)
    assert.deepEqual(kinds(r), truth(before, after))
    assert.notEqual(sandbox.watcherPid, stuck, 'the overflowed watcher was replaced')
    await waitFor('the overflowed watcher to end', async () => !alive(stuck), 60_000)
    // Between calls, so part of no window: the later tests pack the workspace, and need not pack these.
    fs.rmSync(host('flood'), { recursive: true })
  })

  it('stays exact across a pause and resume, and a new sandbox over the same workspace (a restart)', async () => {
    await bash('true')
    const watching = sandbox.watcherPid!
    await sandbox.pause()
    await waitFor('the paused workspace to hold no watcher', async () => !alive(watching) && sandbox.watcherPid === undefined, 60_000)
    // Written between calls: part of neither call's window (as with snapshots around each call).
    fs.writeFileSync(host('while-paused.txt'), 'p')
    await sandbox.resume()
    assert.deepEqual(kinds(await bash('echo r >> src/a.txt')), [{ path: 'src/a.txt', kind: 'modified' }])
    await sandbox.destroy()
    sandbox = (await provider.create(spec(true))) as LocalSandbox
    const before = await snapshotWorkspace(workspaceDir)
    const r = await bash('rm while-paused.txt; echo n > after-restart.txt')
    assert.deepEqual(kinds(r), [
      { path: 'after-restart.txt', kind: 'created' },
      { path: 'while-paused.txt', kind: 'deleted' },
    ])
    assert.deepEqual(kinds(r), truth(before, await snapshotWorkspace(workspaceDir)))
  })

  it('ends the watcher with the sandbox: no process or fence folder left behind', async () => {
    await bash('true')
    const pid = sandbox.watcherPid!
    assert.ok(alive(pid))
    assert.deepEqual(watchersOf(workspaceDir), [String(pid)], 'one watcher per workspace')
    // Its last argument is its private fence folder.
    const fenceDir = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).at(-1)!
    assert.match(fenceDir, /warren-fence-/)
    assert.ok(fs.existsSync(fenceDir))
    await sandbox.destroy()
    await waitFor('the watcher to end', async () => !alive(pid), 60_000)
    assert.deepEqual(watchersOf(workspaceDir), [])
    assert.equal(fs.existsSync(fenceDir), false)
    await assert.rejects(sandbox.openChanges(), /destroyed/)
  })
})

describe('a watcher outlives no service', { skip }, () => {
  it('dies with the process that started it, even SIGKILLed, and the next service removes its fence folder', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-changes-crash-'))
    // The sandbox names a killed service's next start would sweep (its prefix), one of them still held.
    const prefix = `t${process.pid}-crash-`
    const held = fs.mkdtempSync(path.join(os.tmpdir(), `warren-fence-${prefix}held-`))
    try {
      // A service stand-in: it watches a folder, says its watcher's pid, and is then killed outright.
      const code = `
        const { ChangeTracker } = await import(${JSON.stringify(path.resolve(import.meta.dirname, '../src/sandbox/local/change-tracker.ts'))})
        const t = new ChangeTracker(${JSON.stringify(dir)}, ${JSON.stringify(`${prefix}gone`)})
        await (await t.open()).close()
        console.log(t.watcherPid)
        setInterval(() => {}, 1000)`
      const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] })
      let out = ''
      child.stdout.on('data', (c) => (out += c))
      const pid = await waitFor('the watcher pid', async () => (/^\d+\n/.test(out) ? Number(out) : null), 60_000)
      assert.ok(alive(pid))
      assert.deepEqual(watchersOf(dir), [String(pid)])
      const fenceDir = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).at(-1)!
      assert.match(path.basename(fenceDir), new RegExp(`^warren-fence-${prefix}gone-`))
      child.kill('SIGKILL')
      await waitFor('the orphaned watcher to die', async () => !alive(pid), 60_000)
      assert.deepEqual(watchersOf(dir), [])
      assert.ok(fs.existsSync(fenceDir), 'a service killed outright removes nothing itself')
      removeLeftFences(prefix, (name) => name === `${prefix}held`)
      assert.equal(fs.existsSync(fenceDir), false)
      assert.ok(fs.existsSync(held), 'a held sandbox keeps its fence folder')
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
      fs.rmSync(held, { recursive: true, force: true })
    }
  })
})

/**
 * The ceiling on inotify watches one workspace may hold (every folder is one, charged to the
 * host's shared budget): past it the workspace is not watched, and what a bash call changed is
 * found by walking it, with the same answer.
 */
describe('the watch ceiling of a workspace', { skip }, () => {
  const MiB = 1024 * 1024
  let dataDir: string
  let provider: LocalSandboxProvider
  const sandboxes: LocalSandbox[] = []
  before(() => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-watch-ceiling-test-'))
    fs.chmodSync(dataDir, 0o700)
    provider = new LocalSandboxProvider({
      cgroupParent: 'warren-test',
      workspaceRoot: dataDir,
      prefix: `t${randomBytes(3).toString('hex')}-wc-`,
      uidBase: 300_000 + (randomBytes(2).readUInt16BE() % 600) * 100,
      uidCount: 20,
      maxWatches: 30,
    })
  })
  after(async () => {
    for (const s of sandboxes) await s.destroy().catch(() => {})
    await provider?.close()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })
  const spec = (id: string): SandboxSpec => ({ id, workspaceMount: '/workspace', env: {}, network: { allow: [] }, limits: { memoryBytes: 256 * MiB, pids: 128, cpus: 1 } })
  const create = async (id: string) => {
    const sb = (await provider.create(spec(id))) as LocalSandbox
    sandboxes.push(sb)
    return sb
  }

  /** Runs `command` as the bash tool between two full snapshots: what it reports must be what they say changed. */
  const bashAgainstTruth = async (sandbox: LocalSandbox, command: string): Promise<ToolOutcome> => {
    const dir = path.join(dataDir, sandbox.id)
    const ctx: ToolContext = { sandbox, mount: '/workspace', signal: new AbortController().signal, seen: new Map() }
    const before = await snapshotWorkspace(dir)
    const r = await builtinTool('bash')!.run({ command }, ctx)
    assert.equal(r.isError, false, r.output)
    assert.deepEqual((r.changes ?? []).map(({ path, kind }) => ({ path, kind })), compareSnapshots(before, await snapshotWorkspace(dir)))
    return r
  }

  it('watches a workspace under the ceiling; once a command takes it past, the watcher ends and changes are found by walking, exactly', async () => {
    const sb = await create('grow')
    await bashAgainstTruth(sb, 'mkdir -p a b c && echo 1 > a/one.txt')
    const watcher = sb.watcherPid
    assert.ok(watcher && alive(watcher), 'a watcher under the ceiling')
    const grown = await bashAgainstTruth(sb, 'for i in $(seq 40); do mkdir -p many/d$i && echo $i > many/d$i/f; done')
    assert.equal(grown.changes?.length, 40)
    await waitFor('the watcher past the ceiling to end', async () => !alive(watcher), 60_000)
    assert.equal(sb.watcherPid, undefined, 'no watcher past the ceiling')
    const next = await bashAgainstTruth(sb, 'echo 2 >> many/d3/f; rm many/d4/f; echo 3 > a/three.txt')
    assert.equal(next.changes?.length, 3)
    assert.equal(sb.watcherPid, undefined)
  })

  it('never starts a watcher over a workspace past the ceiling, its .git and node_modules folders counted (inotifywait watches them too)', async () => {
    const sb = await create('big')
    await sb.exec({ command: 'for i in $(seq 40); do mkdir -p node_modules/p$i; done' })
    const r = await bashAgainstTruth(sb, 'echo a > a.txt; mkdir d; echo b > d/b.txt')
    assert.deepEqual(r.changes?.map((c) => c.path), ['a.txt', 'd/b.txt'])
    assert.equal(sb.watcherPid, undefined)
  })
})
