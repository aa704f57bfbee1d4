import { test } from 'node:test'
import assert from 'node:assert/strict'
import { globMatch } from './glob.ts'

test('globs: * stays within a segment, ** crosses them, the rest is literal', () => {
  const cases: [string, string, boolean, string?][] = [
    ['*.ts', 'a.ts', true],
    ['*.ts', 'dir/a.ts', false],
    ['**/*.ts', 'dir/a.ts', true],
    ['src/**', 'src/a/b', true],
    ['secrets/**', 'secret/a', false],
    ['*.github.com', 'api.github.com', true, '.'],
    ['*.github.com', 'a.b.github.com', false, '.'],
    ['**.github.com', 'a.b.github.com', true, '.'],
    ['rm *', 'rm -rf /tmp/x', true, '\u0000'],
    ['a*b*c', 'axxbyyc', true],
    ['a*b*c', 'axxbyy', false],
    ['a.c', 'abc', false],
    ['*', '', true],
  ]
  for (const [pattern, text, want, sep] of cases) assert.equal(globMatch(pattern, text, sep ?? '/'), want, `${pattern} ~ ${text}`)
  assert.equal(globMatch('API.*.com', 'api.x.com', '.', true), true)
})

test('globs: a pattern built to make a backtracking matcher explode is answered in one pass', () => {
  // A regular expression of this pattern backtracks exponentially on the near-miss below and
  // would hold the event loop for minutes; the set-of-positions matcher answers at once.
  assert.equal(globMatch(`${'*a'.repeat(20)}*b`, 'a'.repeat(5000)), false)
  assert.equal(globMatch(`${'**a'.repeat(20)}**b`, `${'a'.repeat(5000)}b`), true)
})
