import { LostOwnership } from '../nodes/ownership.store.ts'
import type { Sandbox } from '../sandbox/sandbox.ts'

/** What acts in a workspace: each is checked at the moment it is called. */
const ACTS = new Set<PropertyKey>(['exec', 'spawn', 'writeFile', 'cloneRepo'])

/**
 * The sandbox as a turn or a request gets it: its acts refuse (LostOwnership) unless `held()` says
 * the node still holds its leases at that very moment, renewing them first when that is unsure. A
 * node paused past its lease wakes with its sandbox up and, maybe, a command to run next: the
 * check is made when the act is called, not when the sandbox was handed out, so nothing starts in
 * a session another node now runs. One wrapper per sandbox, so that callers comparing the sandbox
 * they were handed still can.
 */
export function fencedSandboxes(held: () => true | Promise<boolean>): (sessionId: string, sandbox: Sandbox) => Sandbox {
  const wrapped = new WeakMap<Sandbox, Sandbox>()
  return (sessionId, sandbox) => {
    let out = wrapped.get(sandbox)
    if (!out) wrapped.set(sandbox, (out = wrap(sessionId, sandbox, held)))
    return out
  }
}

function wrap(sessionId: string, sandbox: Sandbox, held: () => true | Promise<boolean>): Sandbox {
  return new Proxy(sandbox, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown
      if (typeof value !== 'function') return value
      const fn = value as (...args: unknown[]) => unknown
      if (!ACTS.has(prop)) return fn.bind(target)
      return (...args: unknown[]) => {
        const now = held()
        // The common case acts at once; a stale renewal is renewed first.
        if (now === true) return fn.apply(target, args)
        return now.then((yes) => (yes ? fn.apply(target, args) : Promise.reject(new LostOwnership(sessionId))))
      }
    },
  })
}
