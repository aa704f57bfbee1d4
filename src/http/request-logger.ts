import type { FastifyBaseLogger, FastifyServerOptions } from 'fastify'

type ChildLoggerFactory = NonNullable<FastifyServerOptions['childLoggerFactory']>
type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal'

/** pino's levels; a line below the logger's level is dropped. */
const LEVELS: Record<string, number> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 }

/**
 * The logger Fastify's contract asks of a request (FastifyBaseLogger: a level, one method a level,
 * child), whose pino child is made on the first line actually written. Until then a line below
 * the parent's level is dropped as pino would drop it.
 */
class LazyChild {
  #parent: FastifyBaseLogger
  #bindings: Record<string, unknown>
  #opts: object
  #child: FastifyBaseLogger | undefined
  constructor(parent: FastifyBaseLogger, bindings: Record<string, unknown>, opts: object) {
    this.#parent = parent
    this.#bindings = bindings
    this.#opts = opts
  }
  #real(): FastifyBaseLogger {
    return (this.#child ??= this.#parent.child(this.#bindings, this.#opts))
  }
  #write(level: Level, args: unknown[]): void {
    if (!this.#child && !(LEVELS[level]! >= (LEVELS[this.#parent.level] ?? Infinity))) return
    ;(this.#real()[level] as (...a: unknown[]) => void)(...args)
  }
  get level(): string {
    return (this.#child ?? this.#parent).level
  }
  set level(value: string) {
    this.#real().level = value
  }
  child(bindings: Record<string, unknown>, opts?: object): FastifyBaseLogger {
    return this.#real().child(bindings, opts)
  }
  fatal(...args: unknown[]): void {
    this.#write('fatal', args)
  }
  error(...args: unknown[]): void {
    this.#write('error', args)
  }
  warn(...args: unknown[]): void {
    this.#write('warn', args)
  }
  info(...args: unknown[]): void {
    this.#write('info', args)
  }
  debug(...args: unknown[]): void {
    this.#write('debug', args)
  }
  trace(...args: unknown[]): void {
    this.#write('trace', args)
  }
  silent(): void {}
}

/**
 * Fastify gives every request a pino child logger bound to its id, and making one costs more than
 * the rest of a read answered from memory: at a level that drops the request lines, most
 * requests now never make one. What is written, and its bindings, are pino's as before.
 */
export const lazyChildLogger: ChildLoggerFactory = (logger, bindings, opts) => new LazyChild(logger, bindings, opts) as unknown as FastifyBaseLogger
