import path from 'node:path'
import { Kysely, PostgresDialect, sql, type RawBuilder } from 'kysely'
import { Migrator, type Migration } from 'kysely/migration'
import pg from 'pg'
import { ensurePrivateFile, privateDataDir } from '../shared/private-data-dir.ts'
import { openSqlite } from './sqlite-dialect.ts'
import type { Tables } from './tables.ts'
import * as m001 from './migrations/001-initial.ts'
import * as m002 from './migrations/002-turns.ts'
import * as m003 from './migrations/003-stream-slots.ts'
import * as m004 from './migrations/004-artifacts.ts'
import * as m005 from './migrations/005-previews.ts'
import * as m006 from './migrations/006-blobs.ts'
import * as m007 from './migrations/007-workspace-snapshots.ts'
import * as m008 from './migrations/008-nodes.ts'
import * as m009 from './migrations/009-node-secrets.ts'
import * as m010 from './migrations/010-preview-name-holds.ts'
import * as m011 from './migrations/011-sealed-node-secrets.ts'
import * as m012 from './migrations/012-token-parents.ts'
import * as m013 from './migrations/013-owner-epoch.ts'
import * as m014 from './migrations/014-artifact-blobs.ts'
import * as m015 from './migrations/015-idempotency-node.ts'
import * as m016 from './migrations/016-template-images.ts'

export type DialectName = 'sqlite' | 'postgres'
export type Db = Kysely<Tables>

/** The store: a Kysely handle plus the few facts that differ between dialects. */
export type Store = {
  db: Db
  dialect: DialectName
  /**
   * SQLite only: a mark that moves whenever anything is written to the database, by this process
   * or another (the CLI). What was read under an unchanged mark is still what the store holds.
   * Undefined on PostgreSQL, where no such mark is cheaper than the read it would save.
   */
  writeMark?: () => string
  close(): Promise<void>
}

// int8 (counts, bigint timestamps) arrives as a string by default; every such value here is a
// millisecond timestamp or a count, far below 2^53.
pg.types.setTypeParser(20, (v) => Number(v))

export type OpenStoreOptions = {
  dataDir: string
  databaseUrl?: string
  /** PostgreSQL schema to use (created when missing); tests give each run its own. */
  pgSchema?: string
  /**
   * PostgreSQL ends a session of this node's that sits inside a transaction without a word for
   * longer (idle_in_transaction_session_timeout): a node paused or stalled mid-transaction must not
   * hold its locks (the event sequence's, a session row's) over the whole service until it wakes.
   * The node's lease: past it the node is presumed dead anyway.
   */
  idleInTransactionMs?: number
}

export async function openStore(opts: OpenStoreOptions): Promise<Store> {
  if (opts.databaseUrl) {
    const schema = opts.pgSchema
    if (schema) {
      const admin = new pg.Client({ connectionString: opts.databaseUrl })
      await admin.connect()
      await admin.query(`CREATE SCHEMA IF NOT EXISTS "${schema.replace(/"/g, '')}"`)
      await admin.end()
    }
    const pool = new pg.Pool({
      connectionString: opts.databaseUrl,
      max: 10,
      // A store that cannot be reached must surface quickly as 503, not hang a request.
      connectionTimeoutMillis: 3000,
      ...(opts.idleInTransactionMs ? { idle_in_transaction_session_timeout: opts.idleInTransactionMs } : {}),
      ...(schema ? { options: `-c search_path="${schema.replace(/"/g, '')}"` } : {}),
    })
    // An idle client whose server went away emits 'error'; without a listener that kills the process.
    pool.on('error', () => {})
    // A checked-out client has no pool listener: a connection cut mid-use would otherwise throw an
    // uncaught 'error' and kill the process. Its query still fails, and the pool discards it.
    pool.on('connect', (client) => client.on('error', () => {}))
    const db = new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) })
    const store: Store = { db, dialect: 'postgres', close: () => db.destroy() }
    await migrate(store)
    return store
  }
  // Conversations, tool output and the nodes' secrets: for the service's user alone (the CLI opens
  // the store too, maybe first). The serving process tightens and says so before it gets here.
  privateDataDir(opts.dataDir)
  ensurePrivateFile(sqliteFile(opts.dataDir))
  const { dialect, raw } = openSqlite(sqliteFile(opts.dataDir))
  const db = new Kysely<Tables>({ dialect })
  // data_version moves with other connections' commits, total_changes() with this connection's.
  // Read on every authenticated request: two bare statements returning arrays measured about a
  // third cheaper than one SELECT over the pragma's table function returning an object. Nearly
  // all of it is data_version (about 2 µs: it takes the database's read lock and looks at the
  // WAL index); total_changes() is about 0.2 µs, so counting this connection's writes in memory
  // instead was measured as not worth its risk.
  const other = raw.prepare('PRAGMA data_version')
  const own = raw.prepare('SELECT total_changes()')
  other.setReturnArrays(true)
  own.setReturnArrays(true)
  const writeMark = () => `${(other.get() as unknown as number[])[0]}:${(own.get() as unknown as number[])[0]}`
  const store: Store = { db, dialect: 'sqlite', writeMark, close: () => db.destroy() }
  await migrate(store)
  return store
}

const sqliteFile = (dataDir: string): string => path.join(path.resolve(dataDir), 'warren.db')

/**
 * Which store these options open, for an operator to read: the SQLite file's absolute path, or the
 * PostgreSQL server, database and user (never the password).
 */
export function storeLocation(opts: Pick<OpenStoreOptions, 'dataDir' | 'databaseUrl'>): string {
  if (!opts.databaseUrl) return `SQLite ${sqliteFile(opts.dataDir)}`
  const url = new URL(opts.databaseUrl)
  const user = decodeURIComponent(url.username)
  // Without a database name PostgreSQL uses the user's; a schema can come in the URL's options.
  const database = decodeURIComponent(url.pathname.slice(1)) || user || 'postgres'
  const schema = /search_path\s*=\s*"?([^"\s,]+)/.exec(url.searchParams.get('options') ?? '')?.[1]
  return `PostgreSQL ${url.hostname}:${url.port || '5432'}/${database}${schema ? ` (schema ${schema})` : ''}${user ? ` as ${user}` : ''}`
}

const migrations: Record<string, { up(db: Kysely<any>, d: DialectName): Promise<void> }> = {
  '001-initial': m001,
  '002-turns': m002,
  '003-stream-slots': m003,
  '004-artifacts': m004,
  '005-previews': m005,
  '006-blobs': m006,
  '007-workspace-snapshots': m007,
  '008-nodes': m008,
  '009-node-secrets': m009,
  '010-preview-name-holds': m010,
  '011-sealed-node-secrets': m011,
  '012-token-parents': m012,
  '013-owner-epoch': m013,
  '014-artifact-blobs': m014,
  '015-idempotency-node': m015,
  '016-template-images': m016,
}

async function migrate(store: Store): Promise<void> {
  const list: Record<string, Migration> = {}
  for (const [name, mod] of Object.entries(migrations)) list[name] = { up: (db) => mod.up(db, store.dialect) }
  // Kysely looks for its migration tables in every schema unless told which one: a PostgreSQL
  // shared with other schemas (or other test runs) would make it skip creating them here.
  const migrationTableSchema = await currentSchema(store)
  const migrator = new Migrator({ db: store.db, provider: { getMigrations: async () => list }, ...(migrationTableSchema ? { migrationTableSchema } : {}) })
  for (let attempt = 1; ; attempt++) {
    const { error } = await migrator.migrateToLatest()
    if (!error) return
    // Kysely's introspection reads the catalog of every schema on the server: another schema
    // dropped in the middle of it (another deployment, another test run) fails the read, not
    // our migration. Applied migrations are skipped, so trying again is safe.
    if (attempt >= 3 || !isVanishedObject(error)) throw error
  }
}

function isVanishedObject(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null
  return e?.code === '3F000' || e?.code === '42P01' || /cache lookup failed|does not exist/.test(e?.message ?? '')
}

/** The PostgreSQL schema the store lives in (from search_path); undefined on SQLite. */
export async function currentSchema(store: Store): Promise<string | undefined> {
  if (store.dialect !== 'postgres') return undefined
  return (await sql<{ schema: string }>`SELECT current_schema() AS schema`.execute(store.db)).rows[0]!.schema
}

/** Serializes event-seq assignment on PostgreSQL so no reader sees seq n+1 before n commits. */
export async function lockSeq(db: Db, dialect: DialectName): Promise<void> {
  if (dialect === 'postgres') await sql`SELECT pg_advisory_xact_lock(7311)`.execute(db)
}

/** Transaction-scoped lock on one key (an organization's session count, say); SQLite's single writer needs none. */
export async function lockKey(db: Db, dialect: DialectName, key: string): Promise<void> {
  if (dialect === 'postgres') await sql`SELECT pg_advisory_xact_lock(hashtext(${key}))`.execute(db)
}

/** lockKey for many keys in one statement (SQLite: its single writer already holds them all). */
export async function lockKeys(db: Db, dialect: DialectName, keys: string[]): Promise<void> {
  if (dialect === 'postgres' && keys.length > 0) await sql`SELECT pg_advisory_xact_lock(hashtext(k)) FROM unnest(${keys}::text[]) AS k`.execute(db)
}

/** The smaller of two numbers, spelled per dialect. */
export function least(dialect: DialectName, a: RawBuilder<unknown>, b: RawBuilder<unknown>): RawBuilder<number> {
  return dialect === 'postgres' ? sql<number>`LEAST(${a}, ${b})` : sql<number>`MIN(${a}, ${b})`
}

/** True when an error means the store itself could not be reached (not a bad query). */
export function isStoreUnreachable(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null
  if (!e) return false
  const codes = ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EPIPE', '57P01', '57P02', '57P03', '08006', '08001', '08003', '08004', 'SQLITE_CANTOPEN', 'SQLITE_IOERR', 'SQLITE_BUSY']
  if (e.code && codes.includes(e.code)) return true
  const msg = e.message ?? ''
  return /Connection terminated|timeout exceeded when trying to connect|connect ECONNREFUSED|database is locked|Client has encountered a connection error|not queryable/i.test(msg)
}

/**
 * The text value of one key of a JSON-text column, spelled per dialect. The key is bound as a
 * value on both: spliced into an SQLite JSON path, a NUL or a quote made the path unreadable.
 */
export function jsonText(dialect: DialectName, column: string, key: string): RawBuilder<string | null> {
  return dialect === 'postgres'
    ? sql<string | null>`(${sql.ref(column)}::jsonb ->> ${key})`
    : sql<string | null>`(select j.value from json_each(${sql.ref(column)}) as j where j.key = ${key})`
}
