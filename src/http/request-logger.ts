import type { FastifyBaseLogger, FastifyServerOptions } from 'fastify'

type ChildLoggerFactory = NonNullable<FastifyServerOptions['childLoggerFactory']>

/** pino's levels; a level the logger drops makes its method a no-op. */
const LEVELS: Record<string, number> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 }
const noop = () => {}

/**
 * Fastify gives every request a pino child logger bound to its id, and making one costs more than
 * the rest of a read answered from memory. This child is made on the first line a request
 * actually writes (or any other use): at a level that drops the request lines, most requests
 * never make one. What is written, and its bindings, are pino's as before.
 */
export const lazyChildLogger: ChildLoggerFactory = (logger, bindings, opts) => {
  let child: FastifyBaseLogger | undefined
  const real = () => (child ??= logger.child(bindings, opts))
  return new Proxy({} as FastifyBaseLogger, {
    get(_target, key) {
      // Until the child exists its level is the parent's.
      if (!child && typeof key === 'string' && key in LEVELS && !(LEVELS[key]! >= (LEVELS[logger.level] ?? Infinity))) return noop
      const target = real()
      const value: unknown = Reflect.get(target, key, target)
      return typeof value === 'function' ? value.bind(target) : value
    },
    set: (_target, key, value) => Reflect.set(real(), key, value),
    has: (_target, key) => key in real(),
  })
}
