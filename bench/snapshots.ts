// bench/snapshots: time and size to save and restore a workspace of 20,000 small files through
// the store every node reaches (PostgreSQL chunk rows) and through SQLite's local files, beside
// GNU tar + gzip -1 of the same folder to a local file and back.
// Usage: node_modules/.bin/node bench/snapshots.ts [--files N] [--postgres URL]
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { openStore, type Store } from '../src/db/database.ts'
import { pickBlobStore } from '../src/artifacts/database-blob-store.ts'
import { LocalSandboxProvider } from '../src/sandbox/local/local-provider.ts'
import { workspaceSnapshots } from '../src/workspaces/workspace-snapshots.ts'
import { randomText } from '../src/shared/ids.ts'

const arg = (name: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined)
const FILES = Number(arg('--files')) || 20_000
const PG_URL = arg('--postgres') ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const PER_FOLDER = 50

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-bench-snap-'))
const root = path.join(dataDir, 'workspaces')
const id = 'ses_bench'
const source = path.join(root, id)

// Source-like files: a few hundred bytes to a few KiB of text each, in folders of 50.
const words = 'const let function return import export from await async class interface type value'.split(' ')
let rawBytes = 0
for (let i = 0; i < FILES; i++) {
  const dir = path.join(source, `pkg${Math.floor(i / (PER_FOLDER * 20))}`, `mod${Math.floor(i / PER_FOLDER)}`)
  if (i % PER_FOLDER === 0) fs.mkdirSync(dir, { recursive: true })
  const lines = 5 + (i % 60)
  let text = ''
  for (let l = 0; l < lines; l++) text += `${words[(i + l) % words.length]} x${i}_${l} = ${(i * 7919 + l) % 100003}\n`
  fs.writeFileSync(path.join(dir, `file${i}.ts`), text)
  rawBytes += text.length
}
const reference = execFileSync('sh', ['-c', `cd ${source} && find . -type f | sort | xargs sha256sum | sha256sum`]).toString()

const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`
const ms = (t: number) => `${(performance.now() - t).toFixed(0)} ms`

async function round(label: string, store: Store): Promise<void> {
  const provider = new LocalSandboxProvider({ workspaceRoot: root })
  const snapshots = workspaceSnapshots({ store, provider, blobs: pickBlobStore(store, dataDir, 'snapshots') })
  let t = performance.now()
  const saved = (await snapshots.save(id))!
  const saveTime = ms(t)
  const moved = `${source}.moved`
  fs.renameSync(source, moved)
  t = performance.now()
  const ok = await snapshots.restore(id)
  const restoreTime = ms(t)
  const same = execFileSync('sh', ['-c', `cd ${source} && find . -type f | sort | xargs sha256sum | sha256sum`]).toString() === reference
  fs.rmSync(source, { recursive: true, force: true })
  fs.renameSync(moved, source)
  await snapshots.drop(id)
  console.log(`${label.padEnd(26)} save ${saveTime.padStart(8)}   restore ${restoreTime.padStart(8)}   stored ${mib(saved.bytes)}   restored ${ok && same ? 'identical' : 'DIFFERENT'}`)
}

console.log(`workspace: ${FILES} files in ${Math.ceil(FILES / PER_FOLDER)} folders, ${mib(rawBytes)} of content; ${os.cpus().length} cores`)

const sqlite = await openStore({ dataDir })
await round('SQLite (local files)', sqlite)
await sqlite.close()

const schema = `bench_${randomText(8)}`
let postgres: Store | null = null
try {
  postgres = await openStore({ dataDir, databaseUrl: PG_URL, pgSchema: schema })
  await round('PostgreSQL (chunk rows)', postgres)
} catch (err) {
  console.log(`PostgreSQL skipped: ${(err as Error).message}`)
} finally {
  await postgres?.close()
  const c = new pg.Client({ connectionString: PG_URL })
  await c.connect().then(() => c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)).catch(() => {})
  await c.end().catch(() => {})
}

// The floor: GNU tar with gzip -1 to a local file and back, no store at all.
const archive = path.join(dataDir, 'gnu.tar.gz')
let t = performance.now()
execFileSync('sh', ['-c', `tar -C ${source} -cf - . | gzip -1 > ${archive}`])
const gnuSave = ms(t)
const target = path.join(dataDir, 'gnu-restore')
fs.mkdirSync(target)
t = performance.now()
execFileSync('sh', ['-c', `gzip -dc ${archive} | tar -C ${target} -xf -`])
console.log(`${'GNU tar | gzip -1 (file)'.padEnd(26)} save ${gnuSave.padStart(8)}   restore ${ms(t).padStart(8)}   stored ${mib(fs.statSync(archive).size)}`)

fs.rmSync(dataDir, { recursive: true, force: true })
