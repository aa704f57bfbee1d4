// The silent-failure check (scripts/check-catches.ts): clean on this tree, and it names each
// swallowed failure that gives no reason while letting the explained ones through.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { runScript } from './run-script.ts'

const check = (src?: string) => runScript('check-catches.ts', src)

it('passes on this tree: every swallowed failure says why', async () => {
  const run = await check()
  assert.equal(run.code, 0, run.stderr)
  assert.match(run.stdout, /^check-catches: ok/)
})

it('names each unexplained swallow by file and line, and lets the explained ones through', async () => {
  const src = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-catches-'))
  const files: Record<string, string> = {
    'a.ts': [
      'await p.catch(() => {})',
      '// Gone already: nothing to undo.',
      'await q.catch(() => {})',
      'await r.catch(() => {}) // best effort: the next sweep retries',
      "socket.on('error', () => {})",
      'try { x() } catch {}',
      'await s.catch((err) => log.warn({ err }, "s failed"))',
    ].join('\n'),
    'deep/b.ts': 'const x = 1\n\nvoid t.catch(() => {})\n',
  }
  try {
    for (const [f, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(src, f)), { recursive: true })
      fs.writeFileSync(path.join(src, f), text)
    }
    const run = await check(src)
    assert.equal(run.code, 1)
    const named = run.stderr.split('\n').slice(1).map((l) => l.trim().split(': ')[0]).filter(Boolean).sort()
    assert.deepEqual(named, ['a.ts:1', 'a.ts:5', 'a.ts:6', 'deep/b.ts:3'])
  } finally {
    fs.rmSync(src, { recursive: true, force: true })
  }
})
