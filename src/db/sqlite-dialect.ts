import { DatabaseSync, type StatementSync } from 'node:sqlite'
import { SqliteDialect, type SqliteDatabase, type SqliteStatement } from 'kysely'

/**
 * Kysely's SQLite dialect speaks the better-sqlite3 API; node:sqlite differs in two ways that
 * matter: statements expose columns() instead of `reader`, and take parameters spread.
 */
function adaptStatement(stmt: StatementSync): SqliteStatement {
  // columns() allocates on every call; a statement's shape never changes, so ask once.
  const reader = stmt.columns().length > 0
  return {
    reader,
    all: (params) => stmt.all(...(params as never[])),
    run: (params) => {
      const r = stmt.run(...(params as never[]))
      return { changes: r.changes, lastInsertRowid: r.lastInsertRowid }
    },
    iterate: (params) => stmt.iterate(...(params as never[])),
  }
}

export function openSqlite(file: string): { dialect: SqliteDialect; raw: DatabaseSync } {
  const raw = new DatabaseSync(file, { timeout: 5000 })
  // WAL lets readers in other processes (the CLI minting a token) proceed beside the server.
  raw.exec('PRAGMA journal_mode = WAL')
  raw.exec('PRAGMA synchronous = NORMAL')
  raw.exec('PRAGMA foreign_keys = ON')
  const cache = new Map<string, SqliteStatement>()
  const database: SqliteDatabase = {
    close: () => raw.close(),
    prepare: (sql) => {
      let s = cache.get(sql)
      if (!s) {
        s = adaptStatement(raw.prepare(sql))
        if (cache.size > 500) cache.clear()
        cache.set(sql, s)
      }
      return s
    },
  }
  return { dialect: new SqliteDialect({ database }), raw }
}
