// Routes stay thin: scripts/check-routes.ts refuses transactions, event records and query
// building in `*.routes.ts` files. Run over the tree here, so the suite enforces it.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const checkRoutes = (dir?: string) => spawnSync(process.execPath, ['scripts/check-routes.ts', ...(dir ? [dir] : [])], { encoding: 'utf8', cwd: join(import.meta.dirname, '..') })

it('finds no route file in src holding a transaction, an event record or a query', () => {
  const r = checkRoutes()
  assert.equal(r.status, 0, r.stderr)
  assert.match(r.stdout, /check-routes: \d+ route files, none holds/)
})

it('names every violation in a route file by file, line and what to do instead, and fails', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'check-routes-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  mkdirSync(join(dir, 'things'))
  writeFileSync(join(dir, 'things', 'things.routes.ts'), [
    "import { withEvents } from '../events/record-event.ts'",
    '// withEvents and selectFrom named in a comment are fine',
    'app.post("/x", async () => withEvents(store, bus, async (trx, record) => null))',
    'await store.db.transaction().execute(async (trx) => trx.insertInto("things").values({}).execute())',
    'await db.selectFrom("things").selectAll().execute()',
    'await db.updateTable("things").set({ a: 1 }).execute()',
    'await db.deleteFrom("things").execute()',
    'await sql`select 1`.execute(db)',
    'await recordEvent(trx, event)',
  ].join('\n'))
  // The same calls outside a route file are an operation's business.
  writeFileSync(join(dir, 'things', 'delete-thing.ts'), 'await withEvents(store, bus, async (trx) => trx.deleteFrom("things").execute())\n')
  const r = checkRoutes(dir)
  assert.equal(r.status, 1)
  const lines = r.stderr.trim().split('\n')
  const at = (n: number, what: string) => lines.some((l) => l.includes(`things.routes.ts:${n}: ${what} in a route file`))
  for (const [n, what] of [[1, 'withEvents'], [3, 'withEvents'], [4, '.transaction('], [4, 'insertInto'], [5, 'selectFrom'], [6, 'updateTable'], [7, 'deleteFrom'], [8, 'sql`'], [9, 'recordEvent']] as const) {
    assert.ok(at(n, what), `no message for ${what} on line ${n}:\n${r.stderr}`)
  }
  assert.ok(!lines.some((l) => l.includes('things.routes.ts:2:')), 'a comment is no violation')
  assert.ok(!lines.some((l) => l.includes('delete-thing.ts')), 'only route files are checked')
  assert.match(lines.at(-1)!, /check-routes: 9 violation\(s\)/)
  assert.match(r.stderr, /move it into an operation \(<verb>-<noun>\.ts\)/)
  assert.match(r.stderr, /move it into a store \(<domain>\.store\.ts\)/)
})
