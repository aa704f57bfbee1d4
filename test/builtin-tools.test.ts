import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Sandbox, SandboxProvider } from '../src/sandbox/sandbox.ts'
import { createLocalProvider } from '../src/sandbox/local/create-local.ts'
import { BUILTIN_TOOLS, builtinTool, ruleSubject, type ToolContext, type ToolOutcome } from '../src/tools/builtin/index.ts'
import { unifiedDiff } from '../src/tools/builtin/diff.ts'
import { compareSnapshots } from '../src/tools/builtin/compare-snapshots.ts'
import { snapshotWorkspace } from '../src/sandbox/local/workspace-walk.ts'

/**
 * The built-in tools against a real local sandbox (bubblewrap, as root): what the model gets
 * back, what they refuse, and which file changes they report.
 */

const skip = process.getuid?.() !== 0 ? 'needs root' : spawnSync('sh', ['-c', 'command -v bwrap']).status !== 0 ? 'needs bubblewrap' : false

describe('diff and snapshots (no sandbox)', () => {
  const applies = (oldText: string | null, newText: string) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-diff-'))
    try {
      if (oldText !== null) fs.writeFileSync(path.join(dir, 'f.txt'), oldText)
      fs.writeFileSync(path.join(dir, 'p.diff'), unifiedDiff('f.txt', oldText, newText))
      execFileSync('patch', ['-p1', '-s', '-i', 'p.diff'], { cwd: dir, stdio: 'pipe' })
      return fs.readFileSync(path.join(dir, 'f.txt'), 'utf8')
    } finally {
      fs.rmSync(dir, { recursive: true })
    }
  }

  it('writes standard hunks with 3 lines of context that patch applies', () => {
    const old = Array.from({ length: 20 }, (_, i) => `line ${i + 1}\n`).join('')
    const next = old.replace('line 5\n', 'five\n').replace('line 18\n', '')
    const d = unifiedDiff('src/a.txt', old, next)
    assert.equal(
      d,
      '--- a/src/a.txt\n+++ b/src/a.txt\n@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+five\n line 6\n line 7\n line 8\n' +
        '@@ -15,6 +15,5 @@\n line 15\n line 16\n line 17\n-line 18\n line 19\n line 20\n',
    )
    assert.equal(applies(old, next), next)
    assert.equal(unifiedDiff('x', 'same\n', 'same\n'), '')
  })

  it('diffs a new file against nothing and marks a missing final newline', () => {
    assert.equal(unifiedDiff('n.txt', null, 'a\nb'), '--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n')
    assert.equal(applies('a\nb\n', 'a\nb'), 'a\nb')
    assert.equal(applies(null, 'x\ny\n'), 'x\ny\n')
  })

  it('stays correct on many random edits, and caps a huge diff with a note', () => {
    let seed = 7
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff), seed % n)
    for (let i = 0; i < 60; i++) {
      const a = Array.from({ length: rnd(40) }, () => `w${rnd(5)}\n`)
      const b = a.filter(() => rnd(4) !== 0).flatMap((l) => (rnd(5) === 0 ? [l, `n${rnd(3)}\n`] : [l]))
      assert.equal(applies(a.join(''), b.join('')), b.join(''), `case ${i}`)
    }
    const big = unifiedDiff('big.txt', null, 'x'.repeat(100) + '\n'.repeat(1) + Array.from({ length: 3000 }, (_, i) => `row ${i} ${'y'.repeat(40)}\n`).join(''))
    assert.ok(big.length <= 64 * 1024 + 100, `${big.length}`)
    assert.match(big, /\[diff truncated: [\d,]+ more characters\]\n$/)
  })

  it('snapshots regular files by lstat, skipping .git, node_modules and links, and compares', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-snap-'))
    const outside = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-outside-'))
    try {
      fs.writeFileSync(path.join(outside, 'secret.txt'), 's')
      for (const f of ['a.txt', 'sub/b.txt', 'sub/deep/c.txt', 'node_modules/p/i.js', 'sub/node_modules/q.js', '.git/HEAD']) {
        fs.mkdirSync(path.dirname(path.join(dir, f)), { recursive: true })
        fs.writeFileSync(path.join(dir, f), f)
      }
      fs.symlinkSync(outside, path.join(dir, 'linkdir'))
      fs.symlinkSync(path.join(outside, 'secret.txt'), path.join(dir, 'linkfile'))
      const before = await snapshotWorkspace(dir)
      assert.deepEqual([...before.keys()].sort(), ['a.txt', 'sub/b.txt', 'sub/deep/c.txt'])
      assert.equal(before.get('a.txt')!.size, 5)
      fs.appendFileSync(path.join(dir, 'a.txt'), '!')
      fs.rmSync(path.join(dir, 'sub/b.txt'))
      fs.writeFileSync(path.join(dir, 'sub/new.txt'), 'n')
      fs.writeFileSync(path.join(dir, 'node_modules/p/j.js'), 'ignored')
      fs.writeFileSync(path.join(dir, 'sub/deep/c.txt.tmp'), 'replacement')
      fs.renameSync(path.join(dir, 'sub/deep/c.txt.tmp'), path.join(dir, 'sub/deep/c.txt'))
      assert.deepEqual(compareSnapshots(before, await snapshotWorkspace(dir)), [
        { path: 'a.txt', kind: 'modified' },
        { path: 'sub/b.txt', kind: 'deleted' },
        { path: 'sub/deep/c.txt', kind: 'modified' },
        { path: 'sub/new.txt', kind: 'created' },
      ])
    } finally {
      fs.rmSync(dir, { recursive: true })
      fs.rmSync(outside, { recursive: true })
    }
  })
})

describe('built-in tools in a real sandbox', { skip }, () => {
  const MiB = 1024 * 1024
  let dataDir: string
  let workspaceDir: string
  let provider: SandboxProvider
  let sandbox: Sandbox

  before(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-tools-test-'))
    fs.chmodSync(dataDir, 0o700)
    // The local provider keeps a workspace at <root>/<id>: the host checks below look there.
    workspaceDir = path.join(dataDir, 'ws')
    provider = await createLocalProvider({ workspaceRoot: dataDir, prefix: `b${randomBytes(2).toString('hex')}`, uidBase: 300_000 + Math.floor(Math.random() * 600) * 1000, uidCount: 1000 })
    sandbox = await provider.create({
      id: 'ws',
      workspaceMount: '/workspace',
      env: {},
      network: { allow: [] },
      limits: { memoryBytes: 256 * MiB, pids: 128, cpus: 1 },
    })
  })
  after(async () => {
    await sandbox?.destroy().catch(() => {})
    await provider?.close()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  const context = (over: Partial<ToolContext> = {}): ToolContext => ({
    sandbox,
    mount: '/workspace',
    signal: new AbortController().signal,
    seen: new Map(),
    ...over,
  })
  const call = (name: string, args: Record<string, unknown>, ctx = context()): Promise<ToolOutcome> => builtinTool(name)!.run(args, ctx)
  const sh = async (command: string) => {
    const r = await call('bash', { command })
    assert.equal(r.isError, false, r.output)
    return r
  }
  const host = (rel: string) => path.join(workspaceDir, rel)
  const refused = (r: ToolOutcome, re: RegExp) => {
    assert.equal(r.isError, true, r.output)
    assert.match(r.output, re)
    assert.deepEqual(r.changes, [])
  }

  it('offers exactly the public tools with strict schemas', () => {
    assert.deepEqual(
      BUILTIN_TOOLS.map((t) => [t.name, t.kind, Object.keys((t.parameters as { properties: object }).properties), (t.parameters as { required: string[] }).required]),
      [
        ['bash', 'writes', ['command', 'timeout_seconds'], ['command']],
        ['read_file', 'reads', ['path', 'offset', 'limit'], ['path']],
        ['write_file', 'writes', ['path', 'content'], ['path', 'content']],
        ['edit_file', 'writes', ['path', 'old_string', 'new_string', 'replace_all'], ['path', 'old_string', 'new_string']],
        ['list_files', 'reads', ['path', 'pattern'], []],
        ['grep', 'reads', ['pattern', 'path', 'glob'], ['pattern']],
      ],
    )
    for (const t of BUILTIN_TOOLS) {
      assert.equal(t.parameters.type, 'object')
      assert.equal(t.parameters.additionalProperties, false)
      if (t.name !== 'bash') assert.match(t.description, /\/workspace/, t.name)
    }
    assert.equal(builtinTool('todo_write'), undefined)
  })

  it('gives permission rules the normalised path or the command', () => {
    assert.deepEqual(ruleSubject('bash', { command: 'rm -rf x' }), { command: 'rm -rf x' })
    assert.deepEqual(ruleSubject('read_file', { path: '/workspace/src/../secret.txt' }), { path: 'secret.txt' })
    assert.deepEqual(ruleSubject('edit_file', { path: './src/a.ts', old_string: 'a', new_string: 'b' }), { path: 'src/a.ts' })
    assert.deepEqual(ruleSubject('grep', { pattern: 'x' }), { path: '.' })
    assert.deepEqual(ruleSubject('list_files', { path: '/workspace' }), { path: '.' })
    assert.deepEqual(ruleSubject('write_file', { path: '../etc/x' }), { path: '../etc/x' })
    assert.deepEqual(ruleSubject('web_fetch', { url: 'x' }), {})
  })

  it('turns bad arguments into an error naming the field', async () => {
    refused(await call('read_file', {}), /missing required argument "path"/)
    refused(await call('read_file', { path: 'a', offset: '5' }), /"offset" must be an integer/)
    refused(await call('read_file', { path: 'a', offset: 0 }), /"offset" must be at least 1/)
    refused(await call('write_file', { path: 'a', content: 'x', mode: 7 }), /unknown argument "mode"/)
    refused(await call('edit_file', { path: 'a', old_string: 'x', new_string: 'y', replace_all: 'yes' }), /"replace_all" must be a boolean/)
    refused(await call('bash', { command: 'true', timeout_seconds: 5000 }), /"timeout_seconds" must be at most 1800/)
    refused(await call('grep', { pattern: 7 }), /"pattern" must be a string/)
    refused(await call('bash', { command: 'echo a\u0000b' }), /"command" holds a NUL byte/)
    refused(await call('bash', null as unknown as Record<string, unknown>), /must be a JSON object/)
    // Null stands for "left out" (strict-mode providers send it for optional fields).
    assert.equal((await call('list_files', { path: null, pattern: null })).isError, false)
  })

  it('write_file creates folders and reports created, then modified with a diff; seen follows', async () => {
    const ctx = context()
    const made = await call('write_file', { path: '/workspace/w/deep/a.txt', content: 'one\ntwo\n' }, ctx)
    assert.equal(made.isError, false, made.output)
    assert.equal(fs.readFileSync(host('w/deep/a.txt'), 'utf8'), 'one\ntwo\n')
    assert.deepEqual(made.changes, [{ path: 'w/deep/a.txt', kind: 'created', diff: '--- /dev/null\n+++ b/w/deep/a.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n' }])
    assert.equal(made.summary, 'created w/deep/a.txt (8 bytes)')
    const again = await call('write_file', { path: 'w/deep/a.txt', content: 'one\n2\n' }, ctx)
    assert.deepEqual(again.changes, [{ path: 'w/deep/a.txt', kind: 'modified', diff: '--- a/w/deep/a.txt\n+++ b/w/deep/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n' }])
    assert.equal(ctx.seen.get('w/deep/a.txt'), 'one\n2\n')
    const same = await call('write_file', { path: 'w/deep/a.txt', content: 'one\n2\n' }, ctx)
    assert.deepEqual([same.isError, same.changes, same.summary], [false, [], 'wrote w/deep/a.txt (unchanged)'])
    const bin = await call('write_file', { path: 'w/bin.dat', content: 'a\u0000b' }, ctx)
    assert.deepEqual(bin.changes, [{ path: 'w/bin.dat', kind: 'created' }])
    assert.deepEqual(fs.readFileSync(host('w/bin.dat')), Buffer.from([0x61, 0, 0x62]))
    assert.equal(ctx.seen.has('w/bin.dat'), false)
  })

  it('refuses paths outside the workspace without touching anything', async () => {
    refused(await call('write_file', { path: '../escape.txt', content: 'x' }), /outside the workspace/)
    refused(await call('write_file', { path: '/etc/warren-escape', content: 'x' }), /outside the workspace/)
    refused(await call('read_file', { path: '/etc/passwd' }), /outside the workspace/)
    refused(await call('read_file', { path: 'w/../../ws/x' }), /outside the workspace/)
    refused(await call('edit_file', { path: '/workspace/../etc/hosts', old_string: 'a', new_string: 'b' }), /outside the workspace/)
    refused(await call('list_files', { path: '..' }), /outside the workspace/)
    refused(await call('grep', { pattern: 'root', path: '/etc' }), /outside the workspace/)
    assert.equal(fs.existsSync(path.join(dataDir, 'escape.txt')), false)
    assert.equal(fs.existsSync('/etc/warren-escape'), false)
  })

  it('refuses symlinks the agent planted, for reads and writes', async () => {
    const passwd = fs.readFileSync('/etc/passwd', 'utf8')
    await sh('mkdir -p ln && ln -s /etc/passwd ln/pw && ln -s /etc ln/etc && ln -s ../w ln/inside')
    refused(await call('read_file', { path: 'ln/pw' }), /symbolic link/)
    refused(await call('write_file', { path: 'ln/pw', content: 'pwned' }), /symbolic link/)
    refused(await call('write_file', { path: 'ln/etc/warren-escape', content: 'x' }), /symbolic link/)
    refused(await call('edit_file', { path: 'ln/pw', old_string: 'root', new_string: 'toor' }), /symbolic link/)
    refused(await call('list_files', { path: 'ln/etc' }), /symbolic link/)
    assert.equal(fs.readFileSync('/etc/passwd', 'utf8'), passwd)
    assert.equal(fs.existsSync('/etc/warren-escape'), false)
    const listed = await call('list_files', { path: 'ln' })
    assert.equal(listed.output, 'ln/etc -> /etc\nln/inside -> ../w\nln/pw -> /etc/passwd')
  })

  it('read_file numbers lines, pages with offset and limit, cuts long lines and records seen', async () => {
    const ctx = context()
    const lines = Array.from({ length: 10 }, (_, i) => `line ${i + 1}`)
    lines[6] = 'L'.repeat(2500)
    await call('write_file', { path: 'r/ten.txt', content: `${lines.join('\n')}\n` })
    const all = await call('read_file', { path: '/workspace/r/ten.txt' }, ctx)
    assert.equal(all.isError, false)
    const rows = all.output.split('\n')
    assert.equal(rows.length, 10)
    assert.equal(rows[0], '     1\tline 1')
    assert.equal(rows[9], '    10\tline 10')
    assert.ok(rows[6]!.startsWith(`     7\t${'L'.repeat(2000)}…`), rows[6]!.slice(0, 20))
    assert.match(rows[6]!, /line cut: 2,500 characters/)
    assert.ok(rows[6]!.length < 2100)
    assert.equal(ctx.seen.get('r/ten.txt'), `${lines.join('\n')}\n`)
    const page = await call('read_file', { path: 'r/ten.txt', offset: 3, limit: 2 })
    assert.equal(page.output, '     3\tline 3\n     4\tline 4\n[lines 3-4 of 10; read on with offset=5]')
    assert.equal(page.summary, 'read r/ten.txt (lines 3-4 of 10)')
    const tail = await call('read_file', { path: 'r/ten.txt', offset: 9 })
    assert.equal(tail.output, '     9\tline 9\n    10\tline 10')
    assert.match((await call('read_file', { path: 'r/ten.txt', offset: 11 })).output, /has 10 lines; offset 11 is past its end/)
    await sh('mkdir -p r && seq 1 2500 > r/long.txt')
    const long = (await call('read_file', { path: 'r/long.txt' })).output.split('\n')
    assert.equal(long.length, 2001)
    assert.equal(long[1999], '  2000\t2000')
    assert.equal(long[2000], '[lines 1-2000 of 2500; read on with offset=2001]')
    const noNewline = await call('write_file', { path: 'r/nonl.txt', content: 'a\nb' }).then(() => call('read_file', { path: 'r/nonl.txt' }))
    assert.equal(noNewline.output, '     1\ta\n     2\tb')
  })

  it('read_file describes a binary file instead of showing it, and a missing file is an error', async () => {
    await sh('mkdir -p r && printf "PNG\\000\\001\\002rest" > r/img.bin')
    const bin = await call('read_file', { path: 'r/img.bin' })
    assert.equal(bin.isError, false)
    assert.equal(bin.output, 'r/img.bin is a binary file (10 bytes); its content is not shown.')
    refused(await call('read_file', { path: 'r/missing.txt' }), /File not found: r\/missing\.txt/)
    refused(await call('read_file', { path: 'r' }), /is a folder/)
  })

  it('edit_file replaces exactly once, refuses ambiguity and no-ops, and keeps $ literal', async () => {
    const ctx = context()
    await call('write_file', { path: 'e/a.js', content: 'let a = 1\nlet b = 1\nlet c = 2\n' }, ctx)
    refused(await call('edit_file', { path: 'e/a.js', old_string: '= 1', new_string: '= 9' }, ctx), /occurs 2 times in e\/a\.js.*replace_all/)
    refused(await call('edit_file', { path: 'e/a.js', old_string: 'let d', new_string: 'let e' }, ctx), /old_string was not found in e\/a\.js/)
    refused(await call('edit_file', { path: 'e/a.js', old_string: 'let c', new_string: 'let c' }, ctx), /are the same/)
    refused(await call('edit_file', { path: 'e/none.js', old_string: 'x', new_string: 'y' }, ctx), /File not found/)
    assert.equal(fs.readFileSync(host('e/a.js'), 'utf8'), 'let a = 1\nlet b = 1\nlet c = 2\n')
    const one = await call('edit_file', { path: 'e/a.js', old_string: 'let c = 2', new_string: "let c = '$&$1'" }, ctx)
    assert.equal(one.isError, false, one.output)
    assert.equal(fs.readFileSync(host('e/a.js'), 'utf8'), "let a = 1\nlet b = 1\nlet c = '$&$1'\n")
    assert.deepEqual(one.changes, [{ path: 'e/a.js', kind: 'modified', diff: "--- a/e/a.js\n+++ b/e/a.js\n@@ -1,3 +1,3 @@\n let a = 1\n let b = 1\n-let c = 2\n+let c = '$&$1'\n" }])
    const all = await call('edit_file', { path: 'e/a.js', old_string: '= 1', new_string: '= 7', replace_all: true }, ctx)
    assert.equal(all.summary, 'edited e/a.js (2 replacements)')
    assert.equal(fs.readFileSync(host('e/a.js'), 'utf8'), "let a = 7\nlet b = 7\nlet c = '$&$1'\n")
    assert.equal(ctx.seen.get('e/a.js'), "let a = 7\nlet b = 7\nlet c = '$&$1'\n")
  })

  it('bash returns combined output in order with the exit code, and streams it', async () => {
    const chunks: string[] = []
    const r = await call('bash', { command: 'echo out1; sleep 0.2; echo err1 >&2; sleep 0.2; echo out2; exit 3' }, context({ onOutput: (c) => chunks.push(c) }))
    assert.equal(r.output, 'out1\nerr1\nout2\n[exit code: 3]')
    assert.equal(r.isError, true)
    assert.equal(r.summary, 'exit 3 · 3 lines')
    assert.equal(chunks.join(''), 'out1\nerr1\nout2\n')
    assert.ok(chunks.length >= 3, `chunks: ${JSON.stringify(chunks)}`)
    const ok = await call('bash', { command: 'pwd' })
    assert.deepEqual([ok.output, ok.isError, ok.summary], ['/workspace\n[exit code: 0]', false, 'exit 0 · 1 line'])
    assert.equal((await call('bash', { command: 'true' })).output, '(no output)\n[exit code: 0]')
  })

  it('bash kills a command at its time-out and keeps the head and tail of long output', async () => {
    const t = Date.now()
    const slow = await call('bash', { command: 'echo started; sleep 30', timeout_seconds: 1 })
    assert.ok(Date.now() - t < 8000, `${Date.now() - t} ms`)
    assert.equal(slow.isError, true)
    assert.equal(slow.output, 'started\n[timed out after 1 s; the command was killed]')
    const long = await call('bash', { command: 'seq 1 20000' })
    const full = Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join('')
    const cut = full.length - 30_000
    assert.ok(long.output.startsWith(full.slice(0, 15_000)))
    assert.ok(long.output.endsWith(`${full.slice(-15_000)}[exit code: 0]`))
    assert.match(long.output, new RegExp(`\\[… ${cut.toLocaleString('en-US')} characters cut from the middle of the output …\\]`))
    assert.ok(long.output.length < 30_200, `${long.output.length}`)
    assert.equal(long.summary, 'exit 0 · 20,000 lines')
  })

  it('bash stops when the turn is cancelled', async () => {
    const ac = new AbortController()
    const t = Date.now()
    setTimeout(() => ac.abort(), 300)
    const r = await call('bash', { command: 'echo begun; sleep 30' }, context({ signal: ac.signal }))
    assert.ok(Date.now() - t < 8000)
    assert.equal(r.cancelled, true)
    assert.equal(r.isError, true)
    assert.equal(r.output, 'begun\n[cancelled: the command was stopped]')
    const pre = await call('write_file', { path: 'never.txt', content: 'x' }, context({ signal: ac.signal }))
    assert.equal(pre.cancelled, true)
    assert.equal(fs.existsSync(host('never.txt')), false)
  })

  it('bash reports created, modified and deleted files, with diffs from what the turn has seen', async () => {
    const ctx = context()
    await call('write_file', { path: 'b/seen.txt', content: 'alpha\nbeta\n' }, ctx)
    await sh('printf "x\\n" > b/unseen.txt; printf "bye\\n" > b/gone.txt')
    const r = await call('bash', {
      command:
        'printf "alpha\\nBETA\\n" > b/seen.txt; echo more >> b/unseen.txt; rm b/gone.txt; printf "fresh\\n" > b/new.txt; ' +
        'mkdir -p node_modules/pkg b/node_modules .git && echo 1 > node_modules/pkg/i.js && echo 2 > b/node_modules/j.js && echo 3 > .git/ORIG_HEAD',
    }, ctx)
    assert.equal(r.isError, false, r.output)
    assert.deepEqual(r.changes, [
      { path: 'b/gone.txt', kind: 'deleted' },
      { path: 'b/new.txt', kind: 'created', diff: '--- /dev/null\n+++ b/b/new.txt\n@@ -0,0 +1,1 @@\n+fresh\n' },
      { path: 'b/seen.txt', kind: 'modified', diff: '--- a/b/seen.txt\n+++ b/b/seen.txt\n@@ -1,2 +1,2 @@\n alpha\n-beta\n+BETA\n' },
      { path: 'b/unseen.txt', kind: 'modified' },
    ])
    assert.equal(ctx.seen.get('b/seen.txt'), 'alpha\nBETA\n')
    assert.equal(ctx.seen.get('b/new.txt'), 'fresh\n')
    const quiet = await call('bash', { command: 'cat b/seen.txt >/dev/null' }, ctx)
    assert.deepEqual(quiet.changes, [])
  })

  it('list_files lists sorted files with globs, skipping .git and node_modules, capped', async () => {
    await sh(
      'mkdir -p lf/src/lib lf/node_modules/x lf/.git lf/docs && cd lf && touch top.ts src/a.ts src/a.test.ts src/lib/b.ts src/lib/c.tsx docs/readme.md node_modules/x/i.ts .git/HEAD',
    )
    const names = async (args: Record<string, unknown>) => {
      const r = await call('list_files', args)
      assert.equal(r.isError, false, r.output)
      return r.output.split('\n')
    }
    assert.deepEqual(await names({ path: 'lf' }), ['lf/docs/readme.md', 'lf/src/a.test.ts', 'lf/src/a.ts', 'lf/src/lib/b.ts', 'lf/src/lib/c.tsx', 'lf/top.ts'])
    assert.deepEqual(await names({ path: '/workspace/lf', pattern: '*.ts' }), ['lf/src/a.test.ts', 'lf/src/a.ts', 'lf/src/lib/b.ts', 'lf/top.ts'])
    assert.deepEqual(await names({ path: 'lf', pattern: 'src/*.ts' }), ['lf/src/a.test.ts', 'lf/src/a.ts'])
    assert.deepEqual(await names({ path: 'lf', pattern: '**/*.{ts,tsx}' }), ['lf/src/a.test.ts', 'lf/src/a.ts', 'lf/src/lib/b.ts', 'lf/src/lib/c.tsx', 'lf/top.ts'])
    assert.deepEqual(await names({ path: 'lf/src', pattern: 'lib/**' }), ['lf/src/lib/b.ts', 'lf/src/lib/c.tsx'])
    assert.deepEqual(await names({ path: 'lf', pattern: '*.py' }), ['No files matching *.py under lf.'])
    const whole = await names({})
    assert.ok(whole.includes('lf/top.ts') && whole.includes('w/deep/a.txt'))
    assert.ok(!whole.some((n) => n.includes('node_modules') || n.includes('.git/')), whole.join(' '))
    refused(await call('list_files', { path: 'lf/top.ts' }), /not a folder/)
    await sh('mkdir -p many && cd many && seq -f "f%04g" 1 1005 | xargs touch')
    const many = await names({ path: 'many' })
    assert.equal(many.length, 1001)
    assert.equal(many[999], 'many/f1000')
    assert.equal(many[1000], '[showing the first 1,000 of 1,005 files; narrow the path or pattern]')
  })

  it('grep finds path:line:text with globs and paths, and says when nothing matches', async () => {
    await sh(
      'mkdir -p g/src/lib g/node_modules && cd g && printf "const x = 1\\nfoo()\\n" > src/a.ts && printf "foo\\nbar\\nfoo bar\\n" > src/lib/b.ts && ' +
        'printf "foo in md\\n" > notes.md && printf "foo\\n" > node_modules/dep.ts && printf "foo\\000bin" > data.bin && printf "it\'s -v here\\n" > q.txt',
    )
    const r = await call('grep', { pattern: 'foo', path: 'g' })
    assert.equal(r.isError, false, r.output)
    assert.equal(r.output.split('\n').sort().join('\n'), 'g/notes.md:1:foo in md\ng/src/a.ts:2:foo()\ng/src/lib/b.ts:1:foo\ng/src/lib/b.ts:3:foo bar')
    assert.equal(r.summary, '4 matches')
    const ts = await call('grep', { pattern: 'fo+', path: '/workspace/g', glob: '*.ts' })
    assert.equal(ts.output.split('\n').sort().join('\n'), 'g/src/a.ts:2:foo()\ng/src/lib/b.ts:1:foo\ng/src/lib/b.ts:3:foo bar')
    const deep = await call('grep', { pattern: 'foo', path: 'g', glob: 'src/lib/*.ts' })
    assert.equal(deep.output.split('\n').sort().join('\n'), 'g/src/lib/b.ts:1:foo\ng/src/lib/b.ts:3:foo bar')
    assert.equal((await call('grep', { pattern: '^(bar|baz)$', path: 'g/src/lib/b.ts' })).output, 'g/src/lib/b.ts:2:bar')
    assert.equal((await call('grep', { pattern: "it's -v", path: 'g' })).output, "g/q.txt:1:it's -v here")
    assert.equal((await call('grep', { pattern: '-v', path: 'g/q.txt' })).output, "g/q.txt:1:it's -v here")
    const none = await call('grep', { pattern: 'nowhere-to-be-found', path: 'g' })
    assert.deepEqual([none.output, none.isError], ['No matches.', false])
    refused(await call('grep', { pattern: 'foo(', path: 'g' }), /grep: .*(Unmatched|parenth)/i)
    refused(await call('grep', { pattern: 'foo', path: 'g/missing' }), /No such file/)
    const whole = await call('grep', { pattern: 'const x = 1' })
    assert.equal(whole.output, 'g/src/a.ts:1:const x = 1')
  })

  it('grep stops at 500 matches with a note', async () => {
    await sh('mkdir -p gm && seq 1 2000 | sed "s/^/hit /" > gm/many.txt')
    const r = await call('grep', { pattern: '^hit', path: 'gm' })
    const lines = r.output.split('\n')
    assert.equal(lines.length, 501)
    assert.equal(lines[0], 'gm/many.txt:1:hit 1')
    assert.equal(lines[499], 'gm/many.txt:500:hit 500')
    assert.match(lines[500]!, /^\[stopped after 500 matches; narrow/)
    assert.equal(r.isError, false)
    await sh(`seq 1 400 | sed "s/^/wide ${'w'.repeat(200)} /" > gm/wide.txt`)
    const wide = await call('grep', { pattern: '^wide', path: 'gm/wide.txt' })
    const rows = wide.output.split('\n')
    assert.ok(wide.output.length > 29_000 && wide.output.length < 31_000, `${wide.output.length}`)
    assert.ok(rows.length > 100 && rows.length < 200, `${rows.length}`)
    assert.match(rows.at(-1)!, /^\[stopped after \d+ matches/)
  })
})
