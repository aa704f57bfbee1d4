import type { CompiledQuery, Compilable, QueryResult } from 'kysely'
import type { Db } from './database.ts'

/** What a prepared statement's arguments may be: plain values, each bound as a parameter. */
type Value = string | number | null

const MARK = '\u0000prepared-arg-'

/**
 * A query built and compiled once per dialect, then run with fresh values: hot paths (the token
 * lookup, reading one session, the statements of every agent step) skip rebuilding and compiling
 * Kysely's tree, and its garbage, on every call. In a step's cold code that building measured
 * about 0.7 ms of Kysely a step. Each argument must be used as a plain value parameter (one may
 * be used more than once); a list whose length varies cannot be prepared, nor a build that
 * branches on an argument's value (it is compiled once, with placeholders). It is compiled
 * through the first Kysely instance it is given: plugins of another instance do not apply to it.
 */
function compiledOnce<A extends Value[], R>(build: (db: Db, ...args: A) => Compilable<R>) {
  const byDialect = new Map<unknown, { compiled: CompiledQuery<R>; slots: number[] }>()
  return async (db: Db, ...args: A): Promise<QueryResult<R>> => {
    const key = db.getExecutor().adapter.constructor
    let plan = byDialect.get(key)
    if (!plan) {
      // Placeholders that cannot collide with real values show where each argument lands.
      const placeholders = args.map((_, i) => `${MARK}${i}\u0000`) as A
      const compiled = build(db, ...placeholders).compile()
      const slots = compiled.parameters.map((p) => placeholders.indexOf(p as string))
      // An argument in the text, unused, or changed on its way into a value (a prefix pattern made
      // from it, say) would be bound as the placeholder for ever.
      const altered = compiled.parameters.some((p, i) => slots[i]! < 0 && typeof p === 'string' && p.includes(MARK))
      if (!args.every((_, i) => slots.includes(i)) || compiled.sql.includes(MARK) || altered) {
        throw new Error('prepared: every argument must be a value parameter')
      }
      byDialect.set(key, (plan = { compiled, slots }))
    }
    const { compiled, slots } = plan
    const parameters = compiled.parameters.map((p, i) => (slots[i]! >= 0 ? args[slots[i]!] : p))
    return db.executeQuery<R>({ ...compiled, parameters })
  }
}

/** A prepared query: resolves to its rows (a statement with `returning`, or a select). */
export function prepared<A extends Value[], R>(build: (db: Db, ...args: A) => Compilable<R>) {
  const run = compiledOnce(build)
  return async (db: Db, ...args: A): Promise<R[]> => (await run(db, ...args)).rows
}

/** A prepared insert, update or delete without `returning`: resolves to the rows it changed. */
export function preparedWrite<A extends Value[]>(build: (db: Db, ...args: A) => Compilable<unknown>) {
  // With `returning` SQLite answers rows and no count (PostgreSQL both): such a statement is prepared().
  const run = compiledOnce((db, ...args: A) => {
    const query = build(db, ...args)
    if ((query.compile().query as { returning?: unknown }).returning) throw new Error('preparedWrite: a statement with returning is prepared()')
    return query
  })
  return async (db: Db, ...args: A): Promise<number> => Number((await run(db, ...args)).numAffectedRows ?? 0)
}
