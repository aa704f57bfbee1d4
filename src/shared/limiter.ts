/**
 * Runs at most `max` of the given tasks at once; the rest wait their turn, first come first
 * served. A task that throws frees its place all the same. A task whose signal aborts while it
 * waits leaves the queue at once and rejects with the signal's reason; once started it runs on.
 */
export function limiter(max: number): <T>(task: () => Promise<T>, signal?: AbortSignal) => Promise<T> {
  if (!Number.isInteger(max) || max < 1) throw new RangeError(`limiter: max must be an integer of at least 1, got ${max}`)
  let running = 0
  const queue: (() => void)[] = []
  // A finished task hands its place straight to the first waiter, so none can slip in between.
  const next = () => {
    const waiter = queue.shift()
    if (waiter) waiter()
    else running--
  }
  const turn = (signal?: AbortSignal) =>
    new Promise<void>((go, stop) => {
      const waiter = () => {
        signal?.removeEventListener('abort', leave)
        go()
      }
      const leave = () => {
        const at = queue.indexOf(waiter)
        if (at < 0) return // already handed a place: it runs
        queue.splice(at, 1)
        stop(signal!.reason)
      }
      queue.push(waiter)
      signal?.addEventListener('abort', leave, { once: true })
    })
  return async (task, signal) => {
    signal?.throwIfAborted()
    if (running >= max) await turn(signal)
    else running++
    try {
      return await task()
    } finally {
      next()
    }
  }
}
