// The published description passes `redocly lint` with its recommended rules (redocly.yaml holds
// any deliberate exception, with its reason), so that generators take it as it is.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { useWarren } from './harness.ts'

const ROOT = path.join(import.meta.dirname, '..')
const REDOCLY = path.join(ROOT, 'node_modules/@redocly/cli/bin/cli.js')

type Problem = { ruleId: string; severity: 'error' | 'warn'; message: string; location: { pointer?: string }[] }

/** Lints a document file with the repository's redocly.yaml, offline: no telemetry, no update check. */
export function lint(file: string): { status: number | null; problems: Problem[]; stderr: string } {
  const r = spawnSync(process.execPath, [REDOCLY, 'lint', file, '--config', path.join(ROOT, 'redocly.yaml'), '--format=json'], {
    encoding: 'utf8',
    cwd: ROOT,
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', REDOCLY_SUPPRESS_NOTIFICATIONS: 'true', NO_COLOR: '1' },
    maxBuffer: 64 * 1024 * 1024,
  })
  const start = r.stdout.indexOf('{')
  const problems = start >= 0 ? (JSON.parse(r.stdout.slice(start)) as { problems: Problem[] }).problems : []
  return { status: r.status, problems, stderr: r.stderr }
}

const describe = (p: Problem) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? '?'}`

// The description depends on the route table, not on the store: one dialect is enough.
const w = useWarren('sqlite')

it('passes redocly lint with the recommended rules: no error, no warning', async (t) => {
  const res = await w().inject({ method: 'GET', url: '/v1/openapi.json', token: null })
  assert.equal(res.statusCode, 200)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-openapi-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'openapi.json')
  fs.writeFileSync(file, res.body)
  const { status, problems, stderr } = lint(file)
  assert.deepEqual(problems.map(describe), [])
  assert.equal(status, 0, stderr)
})

it('fails a description that breaks a recommended rule (the linter really runs)', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-openapi-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'openapi.json')
  const doc = {
    openapi: '3.1.0',
    info: { title: 'x', version: 'v1' },
    servers: [{ url: '/' }],
    paths: { '/a': { get: { operationId: 'a', responses: { 200: { description: 'ok' }, 400: { description: 'bad' } } } } },
  }
  fs.writeFileSync(file, JSON.stringify(doc))
  const { status, problems } = lint(file)
  assert.notEqual(status, 0)
  assert.ok(problems.some((p) => p.ruleId === 'operation-summary' && p.severity === 'error'), problems.map(describe).join('\n'))
})
