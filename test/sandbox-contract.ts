import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import type { ExecRequest, Sandbox, SandboxProvider, SandboxSpec } from '../src/sandbox/sandbox.ts'
import { SandboxPathError, SandboxUnavailableError } from '../src/sandbox/sandbox.ts'

/**
 * What every sandbox provider must do, against real sandboxes. A provider running on this host
 * also gives `host` checks: who owns files on the host, which host resources a sandbox holds.
 */
export type ContractOptions = {
  /**
   * A fresh provider. Two providers made with the same `tag` share their host naming, so one's
   * cleanupOrphans finds what the other left; providers of different tags never touch each other.
   */
  makeProvider(tag: string): SandboxProvider
  /** The service's data folder on the host; the provider keeps workspaces in its `workspaces` folder. */
  dataDir: string
  host?: {
    /** Host uid owning the sandbox's processes and files. */
    uidOf(sb: Sandbox): number
    /** Host paths (cgroup folders, say) that exist while the sandbox lives and vanish on destroy. */
    resourcesOf(sb: Sandbox): string[]
  }
}

const MiB = 1024 * 1024
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export function sandboxContract(name: string, o: ContractOptions): void {
  describe(`sandbox contract: ${name}`, () => {
    let provider: SandboxProvider
    const made: Sandbox[] = []
    const providers = new Set<SandboxProvider>()
    const newProvider = (tag: string) => {
      const p = o.makeProvider(tag)
      providers.add(p)
      return p
    }
    const spec = (id: string, over: Partial<SandboxSpec> = {}): SandboxSpec => ({
      id,
      workspaceMount: '/workspace',
      env: { PROFILE_VAR: 'from-profile' },
      network: { allow: [] },
      limits: { memoryBytes: 256 * MiB, pids: 128, cpus: 1 },
      ...over,
    })
    const create = async (id: string, over: Partial<SandboxSpec> = {}, p = provider) => {
      const sb = await p.create(spec(id, over))
      made.push(sb)
      return sb
    }
    const run = async (sb: Sandbox, command: string, more: Partial<ExecRequest> = {}) => {
      const r = await sb.exec({ command, ...more })
      return { ...r, out: r.stdout.toString(), err: r.stderr.toString() }
    }
    const alive = async (sb: Sandbox, pid: string) => (await run(sb, `kill -0 ${pid} 2>/dev/null && echo alive || echo gone`)).out.trim()
    /** Live host processes running as `uid` (what a crashed provider could leave behind); zombies are already dead. */
    const hostPidsOf = (uid: number) =>
      fs.readdirSync('/proc').filter((n) => {
        if (!/^\d+$/.test(n)) return false
        try {
          const status = fs.readFileSync(`/proc/${n}/status`, 'utf8')
          return new RegExp(`^Uid:\\s+${uid}\\s`, 'm').test(status) && !/^State:\s+Z/m.test(status)
        } catch {
          return false
        }
      })

    let main: Sandbox
    before(async () => {
      // The service's own environment: nothing of it may reach a sandbox.
      process.env.OPENAI_API_KEY = 'sk-leak'
      fs.mkdirSync(o.dataDir, { recursive: true })
      fs.writeFileSync(path.join(o.dataDir, 'warren.db'), 'service secrets')
      provider = newProvider('main')
      await provider.cleanupOrphans()
      main = await create('main')
    })
    after(async () => {
      delete process.env.OPENAI_API_KEY
      for (const sb of made) await sb.destroy().catch(() => {})
      for (const p of providers) await p.close()
    })

    it('reports what the host allows in sentences', () => {
      const r = provider.report()
      assert.equal(typeof r.provider, 'string')
      assert.ok(Array.isArray(r.available) && Array.isArray(r.missing))
      assert.ok(r.available.length > 0, JSON.stringify(r))
    })

    it('runs a command and reports its exit code, stdout and stderr', async () => {
      const r = await run(main, 'echo out; echo err >&2; exit 7')
      assert.deepEqual([r.exitCode, r.signal, r.timedOut, r.aborted, r.out, r.err], [7, null, false, false, 'out\n', 'err\n'])
      assert.equal((await run(main, 'true')).exitCode, 0)
    })

    it('streams output while the command still runs', async () => {
      let done = false
      const early: string[] = []
      const r = await main.exec({
        command: 'echo one; echo warn >&2; sleep 1; echo two',
        onStdout: (c) => !done && early.push(`out:${c}`),
        onStderr: (c) => !done && early.push(`err:${c}`),
      })
      done = true
      assert.equal(r.stdout.toString(), 'one\ntwo\n')
      assert.ok(early.some((c) => c.startsWith('out:one')), `stdout chunk before the end: ${early}`)
      assert.ok(early.some((c) => c.startsWith('err:warn')), `stderr chunk before the end: ${early}`)
    })

    it('runs in the working folder and environment asked for, profile variables included', async () => {
      await run(main, 'mkdir -p sub/deeper')
      const rel = await run(main, 'pwd; echo "$FOO|$PROFILE_VAR|$HOME"', { cwd: 'sub', env: { FOO: 'bar baz' } })
      assert.equal(rel.out, '/workspace/sub\nbar baz|from-profile|/workspace\n')
      assert.equal((await run(main, 'pwd', { cwd: '/workspace/sub/deeper' })).out, '/workspace/sub/deeper\n')
      assert.equal((await run(main, 'pwd')).out, '/workspace\n')
      const parallel = await Promise.all([1, 2, 3].map((n) => run(main, `echo ${n}`)))
      assert.deepEqual(parallel.map((r) => r.out), ['1\n', '2\n', '3\n'])
    })

    it('a time-out kills the whole process tree of the command, not the sandbox', async () => {
      const t = Date.now()
      const r = await run(main, 'sleep 100 & echo $!; wait', { timeoutMs: 400 })
      assert.equal(r.timedOut, true)
      assert.equal(r.exitCode, null)
      assert.ok(Date.now() - t < 5000)
      assert.equal(await alive(main, r.out.trim()), 'gone')
    })

    it('an abort kills the whole process tree of the command', async () => {
      const ac = new AbortController()
      setTimeout(() => ac.abort(), 300)
      const r = await main.exec({ command: 'sleep 100 & echo $!; wait' }, ac.signal)
      assert.equal(r.aborted, true)
      assert.equal(r.timedOut, false)
      assert.equal(await alive(main, r.stdout.toString().trim()), 'gone')
      const pre = new AbortController()
      pre.abort()
      assert.equal((await main.exec({ command: 'echo never' }, pre.signal)).aborted, true)
    })

    it('background processes survive between commands', async () => {
      const bg = await run(main, 'nohup sleep 1000 >/dev/null 2>&1 & echo $!')
      const chatty = await run(main, 'while true; do echo tick; sleep 0.05; done & echo "pid $!"')
      assert.equal(bg.exitCode, 0)
      await sleep(200)
      assert.equal(await alive(main, bg.out.trim()), 'alive')
      // It keeps writing to the finished command's pipe without blocking or dying.
      assert.equal(await alive(main, /pid (\d+)/.exec(chatty.out)![1]!), 'alive')
    })

    it('spawns a process it talks to over stdin and stdout, as its user, and kills it with what it started', async () => {
      const proc = await main.spawn({ command: 'echo "uid $(id -u)" >&2; sleep 1000 & while IFS= read -r line; do echo "got $line"; done', env: { GREETING: 'hi' } })
      let out = ''
      let err = ''
      proc.stdout.on('data', (d: Buffer) => (out += d))
      proc.stderr.on('data', (d: Buffer) => (err += d))
      proc.stdin.write('one\ntwo\n')
      for (let i = 0; i < 200 && out !== 'got one\ngot two\n'; i++) await sleep(10)
      assert.equal(out, 'got one\ngot two\n')
      assert.match(err, /^uid \d+\n$/)
      assert.notEqual(err, 'uid 0\n', 'never as root')
      const sleeper = await run(main, "pgrep -f 'sleep 1000' | head -n 5")
      await proc.kill()
      assert.equal(await proc.exited, null)
      // Its background child went with it; earlier background commands of exec are another group.
      const after = (await run(main, "pgrep -f 'sleep 1000' | wc -l")).out.trim()
      assert.ok(Number(after) < sleeper.out.trim().split('\n').length, `${sleeper.out} then ${after}`)
    })

    it('gives a spawned process the extra pipes asked for as fds 3 and 4, both ways, and no other descriptor of its start', async () => {
      const command = 'for f in 3 4 5 6 7 8; do [ -e /proc/$$/fd/$f ] && printf "$f "; done >&2; IFS= read -r a <&3; echo "got $a" >&4; IFS= read -r b; echo "stdin $b" >&4'
      const proc = await main.spawn({ command, extraFds: 2 })
      assert.equal(proc.fds.length, 2)
      let err = ''
      proc.stderr.on('data', (d: Buffer) => (err += d))
      let answers = ''
      proc.fds[1]!.on('data', (d: Buffer) => (answers += d))
      const answered = new Promise((resolve) => proc.fds[1]!.once('close', resolve))
      proc.fds[0]!.write('ping\n')
      proc.stdin.write('pong\n')
      assert.equal(await proc.exited, 0)
      await answered
      assert.equal(answers, 'got ping\nstdin pong\n')
      assert.equal(err, '3 4 ', 'fds 3 and 4 only: not the start’s control pipe')
      await assert.rejects(main.spawn({ command: 'true', extraFds: 9 }), /extraFds/)
    })

    it('writes and reads workspace files with their modes', async () => {
      await main.writeFile('files/a.txt', Buffer.from('hello'), 0o640)
      const r = await run(main, 'cat files/a.txt; echo; stat -c %a files/a.txt; echo more > files/b.txt')
      assert.equal(r.out, 'hello\n640\n')
      assert.equal((await main.readFile('files/a.txt'))?.toString(), 'hello')
      assert.equal((await main.readFile('files/b.txt'))?.toString(), 'more\n')
      await main.writeFile('files/a.txt', Buffer.from('hi'))
      assert.equal((await main.readFile('files/a.txt'))?.toString(), 'hi')
      await main.writeFile('files/run.sh', Buffer.from('#!/bin/sh\necho ran\n'), 0o755)
      assert.equal((await run(main, './files/run.sh')).out, 'ran\n')
      assert.equal(await main.readFile('files/missing.txt'), null)
      assert.equal(await main.readFile('nowhere/missing.txt'), null)
    })

    it('lists, stats, streams and snapshots workspace files, null for what is missing', async () => {
      await run(main, 'mkdir -p tree/sub tree/.git tree/node_modules/p && echo one > tree/a.txt && printf 12345 > tree/sub/b.txt && echo x > tree/.git/HEAD && echo y > tree/node_modules/p/i.js && ln -s a.txt tree/to-a && mkfifo tree/pipe')
      const listed = (await main.list('tree'))!.sort((x, y) => (x.path < y.path ? -1 : 1))
      assert.deepEqual(listed, [
        { path: 'tree/a.txt', type: 'file' },
        { path: 'tree/pipe', type: 'other' },
        { path: 'tree/sub/b.txt', type: 'file' },
        { path: 'tree/to-a', type: 'link', target: 'a.txt' },
      ])
      assert.ok((await main.list(''))!.some((e) => e.path === 'tree/sub/b.txt'))
      assert.deepEqual(await main.list('./tree/sub'), [{ path: 'tree/sub/b.txt', type: 'file' }])
      assert.equal(await main.list('tree/missing'), null)
      assert.equal(await main.list('tree/a.txt'), null)
      const st = await main.stat('tree/sub/b.txt')
      assert.deepEqual([st?.type, st?.size], ['file', 5])
      assert.equal((await main.stat('tree/sub'))?.type, 'folder')
      assert.equal((await main.stat('tree/to-a'))?.type, 'link')
      assert.equal(await main.stat('tree/missing'), null)
      assert.equal(await main.stat('nowhere/missing'), null)
      const opened = (await main.openRead('tree/sub/b.txt'))!
      assert.equal(opened.size, 5)
      const chunks: Buffer[] = []
      for await (const c of opened.stream) chunks.push(c as Buffer)
      assert.equal(Buffer.concat(chunks).toString(), '12345')
      assert.equal(await main.openRead('tree/missing'), null)
      await assert.rejects(main.openRead('tree/sub'), SandboxPathError)
      await assert.rejects(main.openRead('tree/pipe'), SandboxPathError)
      const snap = await main.snapshot()
      assert.equal(snap.get('tree/sub/b.txt')?.size, 5)
      for (const p of ['tree/to-a', 'tree/pipe', 'tree/.git/HEAD', 'tree/node_modules/p/i.js']) assert.equal(snap.has(p), false, p)
      await run(main, 'echo more >> tree/a.txt')
      assert.notEqual((await main.snapshot()).get('tree/a.txt')?.size, snap.get('tree/a.txt')?.size)
    })

    it('tells what changed between a window opening and closing, as two snapshots would', async () => {
      await run(main, 'mkdir -p win/old && echo a > win/a.txt && echo b > win/old/b.txt && echo c > win/c.txt')
      const before = await main.snapshot()
      const window = await main.openChanges()
      await run(main, 'echo more >> win/a.txt; rm win/c.txt; mv win/old win/new; mkdir -p win/deep/er && echo d > win/deep/er/d.txt; ln -s /etc win/link; echo g > win/.git 2>/dev/null; mkdir -p win/node_modules && echo n > win/node_modules/n.js')
      const changes = await window.close()
      const after = await main.snapshot()
      assert.deepEqual(changes, [
        { path: 'win/.git', kind: 'created' },
        { path: 'win/a.txt', kind: 'modified' },
        { path: 'win/c.txt', kind: 'deleted' },
        { path: 'win/deep/er/d.txt', kind: 'created' },
        { path: 'win/new/b.txt', kind: 'created' },
        { path: 'win/old/b.txt', kind: 'deleted' },
      ])
      // The same answer as comparing the snapshots taken around it.
      const compared = [...after].filter(([p, s]) => p.startsWith('win/') && (!before.has(p) || before.get(p)!.mtimeMs !== s.mtimeMs || before.get(p)!.size !== s.size || before.get(p)!.ino !== s.ino)).map(([p]) => p)
      const gone = [...before.keys()].filter((p) => p.startsWith('win/') && !after.has(p))
      assert.deepEqual(changes.map((c) => c.path), [...compared, ...gone].sort())
      // Nothing changed: nothing reported.
      assert.deepEqual(await (await main.openChanges()).close(), [])
    })

    it('refuses paths that leave the workspace, through symlinks too', async () => {
      await run(main, 'ln -s /etc escape; ln -s /etc/passwd pw; mkdir -p in; ln -s .. in/up')
      for (const p of ['escape/x', 'pw', 'in/up/x', '../x', 'a/../../x', '/etc/x', '']) {
        await assert.rejects(main.writeFile(p, Buffer.from('x')), SandboxPathError, `writeFile(${p})`)
      }
      for (const p of ['escape/passwd', 'pw', '../etc/passwd', '/etc/passwd']) {
        await assert.rejects(main.readFile(p), SandboxPathError, `readFile(${p})`)
      }
      for (const p of ['escape/passwd', 'in/up/etc/passwd', '../etc/passwd', '/etc/passwd', '']) {
        await assert.rejects(main.stat(p), SandboxPathError, `stat(${p})`)
        await assert.rejects(main.openRead(p), SandboxPathError, `openRead(${p})`)
      }
      await assert.rejects(main.openRead('pw'), SandboxPathError, 'openRead(pw)')
      for (const p of ['../x', '/etc', 'a/../../x']) await assert.rejects(main.list(p), SandboxPathError, `list(${p})`)
      // A link is what it is, never what it points to: stat names it, a listing does not enter it.
      assert.equal((await main.stat('pw'))?.type, 'link')
      assert.equal(await main.list('escape'), null)
      assert.equal(await main.list('in/up'), null)
      assert.ok((await main.list('in'))!.some((e) => e.path === 'in/up' && e.type === 'link'))
      assert.ok(![...(await main.snapshot()).keys()].some((p) => p.startsWith('escape/') || p.startsWith('in/up/')))
      assert.equal(fs.existsSync('/etc/x'), false)
    })

    it('runs as an unprivileged user: not root inside, files not owned by root on the host', async () => {
      const r = await run(main, 'id -u; echo made > owned.txt; cat /proc/self/status | grep CapEff')
      const [uid, caps] = r.out.trim().split('\n')
      assert.notEqual(uid, '0')
      assert.match(caps!, /CapEff:\s+0+$/)
      if (!o.host) return
      const st = fs.statSync(path.join(o.dataDir, 'workspaces', 'main', 'owned.txt'))
      assert.notEqual(st.uid, 0)
      assert.equal(st.uid, o.host.uidOf(main))
      await main.writeFile('deep/er/service.txt', Buffer.from('x'))
      for (const p of ['deep', 'deep/er', 'deep/er/service.txt']) {
        assert.equal(fs.statSync(path.join(o.dataDir, 'workspaces', 'main', p)).uid, o.host.uidOf(main), p)
      }
    })

    it('cannot see the service data folder, another workspace or the service environment', async () => {
      const other = await create('other')
      await other.writeFile('their-secret.txt', Buffer.from('theirs'))
      const otherDir = path.join(o.dataDir, 'workspaces', 'other')
      const probes = [
        `ls ${o.dataDir}`,
        `cat ${path.join(o.dataDir, 'warren.db')}`,
        `ls ${otherDir}`,
        `cat ${path.join(otherDir, 'their-secret.txt')}`,
        `cat ${path.join(o.dataDir, 'workspaces', 'main', 'owned.txt')}`,
      ]
      for (const c of probes) assert.notEqual((await run(main, c)).exitCode, 0, c)
      assert.notEqual((await run(main, 'grep -rs -D skip theirs / --exclude-dir=proc --exclude-dir=dev --exclude-dir=usr')).exitCode, 0)
      const env = await run(main, 'env; cat /proc/*/environ 2>/dev/null | tr "\\0" "\\n"')
      assert.doesNotMatch(env.out, /sk-leak|OPENAI_API_KEY/)
    })

    it('pause freezes every process, background ones included; resume lets them go on', async () => {
      // Written aside and renamed, so a freeze never leaves the file half-written.
      await run(main, '(i=0; while true; do i=$((i+1)); echo $i > counter.new; mv counter.new counter; sleep 0.02; done) >/dev/null 2>&1 &')
      await sleep(300)
      await main.pause()
      assert.equal(main.state, 'paused')
      await assert.rejects(main.exec({ command: 'true' }), (e) => e instanceof SandboxUnavailableError && /paused/.test(e.message))
      const c1 = Number((await main.readFile('counter'))?.toString())
      await sleep(400)
      const c2 = Number((await main.readFile('counter'))?.toString())
      assert.ok(c1 > 0 && c2 === c1, `counter moved while paused: ${c1} → ${c2}`)
      await main.pause()
      await main.resume()
      assert.equal(main.state, 'running')
      await sleep(300)
      const c3 = Number((await main.readFile('counter'))?.toString())
      assert.ok(c3 > c2, `counter stuck after resume: ${c2} → ${c3}`)
    })

    it('a fork bomb hits the pids limit, is killed with its command, and the service keeps answering', async () => {
      const bomb = await create('bomb', { limits: { memoryBytes: 256 * MiB, pids: 64, cpus: 0.5 } })
      let worst = 0
      let last = Date.now()
      const tick = setInterval(() => {
        worst = Math.max(worst, Date.now() - last - 20)
        last = Date.now()
      }, 20)
      try {
        // `exec sleep`: the command's own shell takes no fork of its own, which the bomb may already have made impossible.
        const r = await run(bomb, 'f() { f | f & }; f; exec sleep 100', { timeoutMs: 3000 })
        assert.equal(r.timedOut, true)
      } finally {
        clearInterval(tick)
      }
      assert.ok(worst < 1000, `the event loop stalled ${worst} ms`)
      assert.equal((await run(bomb, 'echo still here')).out, 'still here\n')
      assert.equal((await run(main, 'echo fine')).out, 'fine\n')
    })

    it('a command outgrowing the memory limit is killed, and the sandbox goes on', async () => {
      const small = await create('small', { limits: { memoryBytes: 64 * MiB, pids: 64, cpus: 1 } })
      // tail keeps everything it reads when no newline comes: 300 MiB against a 64 MiB ceiling.
      const r = await run(small, 'head -c 300M /dev/zero | tail >/dev/null')
      assert.ok(r.exitCode === 137 || r.signal === 'SIGKILL', `exit ${r.exitCode} ${r.signal}: ${r.err}`)
      assert.equal((await run(small, 'echo ok')).out, 'ok\n')
    })

    it('destroy kills everything, removes host resources, keeps the workspace and is idempotent', async () => {
      const d = await create('doomed')
      const bg = await run(d, 'sleep 1000 >/dev/null 2>&1 & echo $!')
      assert.equal(bg.exitCode, 0)
      // A window left open when the sandbox goes: its close rejects, and no watcher stays behind.
      const window = await d.openChanges()
      const resources = o.host?.resourcesOf(d) ?? []
      for (const r of resources) assert.ok(fs.existsSync(r), r)
      await d.destroy()
      assert.equal(d.state, 'destroyed')
      for (const r of resources) assert.equal(fs.existsSync(r), false, r)
      if (o.host) assert.deepEqual(hostPidsOf(o.host.uidOf(d)), [])
      await assert.rejects(d.exec({ command: 'true' }), SandboxUnavailableError)
      await assert.rejects(window.close(), SandboxUnavailableError)
      await assert.rejects(d.openChanges(), SandboxUnavailableError)
      await d.destroy()
      assert.ok(fs.existsSync(path.join(o.dataDir, 'workspaces', 'doomed')))
      assert.equal(provider.get('doomed'), null)
    })

    it('reads a workspace with no live sandbox: paused, destroyed, or after a restart', async () => {
      const sb = await create('outlives')
      await run(sb, 'mkdir -p out && printf kept > out/f.txt && ln -s /etc/passwd out/pw')
      await sb.pause()
      const reads = provider.workspace('outlives')
      assert.equal((await reads.readFile('out/f.txt'))?.toString(), 'kept')
      await sb.destroy()
      assert.equal(provider.get('outlives'), null)
      // A provider of a later run (nothing of the first one up) reads it too.
      const later = newProvider('main').workspace('outlives')
      assert.equal((await later.stat('out/f.txt'))?.size, 4)
      assert.deepEqual((await later.list('out'))?.map((e) => e.path).sort(), ['out/f.txt', 'out/pw'])
      const opened = (await later.openRead('out/f.txt'))!
      const chunks: Buffer[] = []
      for await (const c of opened.stream) chunks.push(c as Buffer)
      assert.equal(Buffer.concat(chunks).toString(), 'kept')
      assert.ok((await later.snapshot()).has('out/f.txt'))
      await assert.rejects(later.openRead('out/pw'), SandboxPathError)
      await assert.rejects(later.readFile('../main/owned.txt'), SandboxPathError)
      // A workspace never made holds nothing.
      const none = provider.workspace('never-made')
      assert.equal(await none.readFile('f.txt'), null)
      assert.equal(await none.stat('f.txt'), null)
      assert.equal(await none.list(''), null)
      assert.equal(await none.openRead('f.txt'), null)
    })

    it('deleteWorkspace destroys the sandbox and removes the workspace; an existing workspace that is gone is refused', async () => {
      const sb = await create('deleted')
      await sb.writeFile('f.txt', Buffer.from('x'))
      await provider.deleteWorkspace('deleted')
      assert.equal(sb.state, 'destroyed')
      assert.equal(await provider.workspace('deleted').readFile('f.txt'), null)
      await provider.deleteWorkspace('deleted')
      await assert.rejects(create('deleted', { existing: true }), SandboxUnavailableError)
      const fresh = await create('deleted')
      assert.equal(await fresh.readFile('f.txt'), null)
      assert.equal((await run(fresh, 'ls | wc -l')).out.trim(), '0')
    })

    it('clones a repository into an empty workspace only, and says why a clone failed', async () => {
      const repo = path.join(o.dataDir, 'repo-src')
      const git = (...args: string[]) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-C', repo, ...args], { stdio: 'pipe' })
      fs.mkdirSync(repo, { recursive: true })
      git('init', '-q', '-b', 'trunk')
      fs.writeFileSync(path.join(repo, 'README'), 'hello\n')
      git('add', '.')
      git('commit', '-q', '-m', 'one')
      const sb = await create('cloned')
      assert.deepEqual(await sb.cloneRepo({ url: repo, timeoutMs: 60_000 }), { branch: 'trunk' })
      assert.equal((await run(sb, 'cat README; echo more >> README')).out, 'hello\n')
      assert.equal(await sb.cloneRepo({ url: repo, timeoutMs: 60_000 }), null)
      const empty = await create('clone-failed')
      await assert.rejects(empty.cloneRepo({ url: path.join(o.dataDir, 'no-such-repo'), timeoutMs: 60_000 }), (e: Error) => /no-such-repo|does not exist/.test(e.message))
      assert.equal((await run(empty, 'ls -A | wc -l')).out.trim(), '0')
    })

    it('cleanupOrphans removes what a crashed provider left behind', async () => {
      const sb = await create('orphan', {}, newProvider('orphans'))
      assert.equal((await run(sb, 'nohup sleep 1000 >/dev/null 2>&1 &')).exitCode, 0)
      const resources = o.host?.resourcesOf(sb) ?? []
      const uid = o.host?.uidOf(sb)
      // The crashed provider is dropped without destroy; a new one starts over.
      const next = newProvider('orphans')
      await next.cleanupOrphans()
      for (const r of resources) assert.equal(fs.existsSync(r), false, r)
      if (uid !== undefined) assert.deepEqual(hostPidsOf(uid), [])
      assert.equal((await run(main, 'echo untouched')).out, 'untouched\n')
      const again = await create('orphan', {}, next)
      assert.equal((await run(again, 'echo back')).out, 'back\n')
    })
  })
}
