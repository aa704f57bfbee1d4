import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Log } from '../../shared/log.ts'

/**
 * Playwright hands each DevTools event to its handlers in a microtask of its own (a
 * Promise.resolve().then in its CRSession), so a handler that chokes on what a browser said (an
 * attachedToTarget without its target, say) rejects a promise nobody can await, and an unhandled
 * rejection ends Node. What the browser says is the workspace's to choose: the browser runs as
 * the workspace's uid, which may ptrace it (or write its memory through /proc) on a kernel
 * without YAMA. cdpPipe checks each message's shape; how deep playwright reads an event's params
 * is past what it can check, so such rejections, told by playwright's own code on their stack,
 * are logged and the service goes on (at worst that one session's browser is confused). Any
 * other unhandled rejection still ends the process, as Node's default does.
 */
export function survivePlaywrightRejections(log: Log): void {
  if (installed) return
  installed = true
  process.on('unhandledRejection', (reason) => {
    if (!fromPlaywright(reason)) throw reason
    log.error({ err: reason, component: 'browser' }, 'playwright refused what a session browser sent; the service goes on')
  })
}
let installed = false

/** playwright-core's folder, as module paths name it (resolved and real, node_modules may be a link). */
const PLAYWRIGHT_DIRS = (() => {
  const dir = path.dirname(fileURLToPath(import.meta.resolve('playwright-core')))
  return [...new Set([dir, fs.realpathSync(dir)])].map((d) => `${d}${path.sep}`)
})()

function fromPlaywright(reason: unknown): boolean {
  const stack = reason instanceof Error ? reason.stack : undefined
  return typeof stack === 'string' && PLAYWRIGHT_DIRS.some((dir) => stack.includes(dir))
}
