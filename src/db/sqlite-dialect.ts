import { DatabaseSync, type StatementSync } from 'node:sqlite'
import { SqliteDialect, type SqliteDatabase, type SqliteStatement } from 'kysely'

/**
 * Kysely's SQLite dialect speaks the better-sqlite3 API; node:sqlite differs in two ways that
 * matter: statements expose columns() instead of `reader`, and take parameters spread.
 */
function adaptStatement(stmt: StatementSync, counted: () => void): SqliteStatement {
  // columns() allocates on every call; a statement's shape never changes, so ask once.
  const reader = stmt.columns().length > 0
  return {
    reader,
    all: (params) => {
      counted()
      return stmt.all(...(params as never[]))
    },
    run: (params) => {
      counted()
      const r = stmt.run(...(params as never[]))
      return { changes: r.changes, lastInsertRowid: r.lastInsertRowid }
    },
    iterate: (params) => {
      counted()
      return stmt.iterate(...(params as never[]))
    },
  }
}

const READ_ONLY = /^\s*select\b/i
const noop = (): void => {}

/**
 * `ownWrites` moves with every statement this connection runs that may write (anything but a
 * plain SELECT: inserts, updates, deletes, transaction control, DDL), counted in memory as it
 * runs; with the store's data_version (other connections' commits) it makes the write mark, for
 * one SQLite statement a read instead of two. Counting more than the writes only costs a re-read.
 */
export function openSqlite(file: string): { dialect: SqliteDialect; raw: DatabaseSync; ownWrites: () => number } {
  const raw = new DatabaseSync(file, { timeout: 5000 })
  // WAL lets readers in other processes (the CLI minting a token) proceed beside the server.
  raw.exec('PRAGMA journal_mode = WAL')
  raw.exec('PRAGMA synchronous = NORMAL')
  raw.exec('PRAGMA foreign_keys = ON')
  const cache = new Map<string, SqliteStatement>()
  let writes = 0
  const counted = () => {
    writes++
  }
  const database: SqliteDatabase = {
    close: () => raw.close(),
    prepare: (sql) => {
      let s = cache.get(sql)
      if (!s) {
        s = adaptStatement(raw.prepare(sql), READ_ONLY.test(sql) ? noop : counted)
        if (cache.size > 500) cache.clear()
        cache.set(sql, s)
      }
      return s
    },
  }
  return { dialect: new SqliteDialect({ database }), raw, ownWrites: () => writes }
}
