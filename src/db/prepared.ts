import type { CompiledQuery, Compilable } from 'kysely'
import type { Db } from './database.ts'

/**
 * A query built and compiled once per dialect, then run with fresh values: hot read paths (the
 * token lookup, reading one session) skip rebuilding and compiling Kysely's tree, and its
 * garbage, on every request. Each argument must be used as a plain value parameter.
 */
export function prepared<A extends string[], R>(build: (db: Db, ...args: A) => Compilable<R>) {
  const byDialect = new Map<unknown, { compiled: CompiledQuery<R>; slots: number[] }>()
  return async (db: Db, ...args: A): Promise<R[]> => {
    const executor = db.getExecutor()
    const key = executor.adapter.constructor
    let plan = byDialect.get(key)
    if (!plan) {
      // Placeholders that cannot collide with real values show where each argument lands.
      const placeholders = args.map((_, i) => `\u0000prepared-arg-${i}\u0000`) as A
      const compiled = build(db, ...placeholders).compile()
      const slots = compiled.parameters.map((p) => placeholders.indexOf(p as string))
      if (slots.filter((s) => s >= 0).length !== args.length) throw new Error('prepared: every argument must be a value parameter')
      byDialect.set(key, (plan = { compiled, slots }))
    }
    const { compiled, slots } = plan
    const parameters = compiled.parameters.map((p, i) => (slots[i]! >= 0 ? args[slots[i]!] : p))
    return (await db.executeQuery<R>({ ...compiled, parameters })).rows
  }
}
