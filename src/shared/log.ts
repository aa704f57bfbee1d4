/**
 * What the service's background parts (the turn runner, the delivery worker) log through: the
 * service's pino logger, the one Fastify writes requests to, so every runtime event is one
 * structured line at the configured level. Errors go under `err`, which pino serializes.
 */
export type Log = {
  info(obj: object, msg: string): void
  warn(obj: object, msg: string): void
  error(obj: object, msg: string): void
}

/** For a part run on its own (a test's extra worker): it says nothing. */
export const silentLog: Log = { info: () => {}, warn: () => {}, error: () => {} }

/**
 * A catch handler for a failure the caller can live with but an operator should hear of: one warn
 * line saying what failed, the error under `err`. Where dropping a failure is right, the catch says
 * why in a comment instead (scripts/check-catches.ts holds every silent one to that).
 */
export function logFailure(log: Log, what: string, fields: object = {}): (err: unknown) => void {
  return (err) => log.warn({ ...fields, err }, what)
}
