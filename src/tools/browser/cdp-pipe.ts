import type { Duplex } from 'node:stream'
import type { ConnectOverCDPTransport } from 'playwright-core'

/**
 * Most bytes one message may take (a full-page screenshot is a few MiB of base64): the pipe's
 * other end is reachable from the workspace (see SpawnRequest.extraFds), which could otherwise
 * send one endless message.
 */
const MAX_MESSAGE = 64 * 1024 * 1024

/** Why `message` is not a DevTools message (an answer, or an event), or null when it is one. */
function refusal(message: unknown): string | null {
  if (typeof message !== 'object' || message === null || Array.isArray(message)) return 'a message that is not an object'
  const m = message as Record<string, unknown>
  const isObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v)
  if (m.sessionId !== undefined && typeof m.sessionId !== 'string') return 'a session id that is not a string'
  if (m.id !== undefined) {
    if (!Number.isSafeInteger(m.id)) return 'an answer whose id is not an integer'
    if (m.error !== undefined) return isObject(m.error) && typeof (m.error as { message?: unknown }).message === 'string' ? null : 'an error without a message'
    return isObject(m.result) ? null : 'an answer without a result'
  }
  if (typeof m.method !== 'string') return 'an event without a method'
  return m.params === undefined || isObject(m.params) ? null : 'an event whose params are not an object'
}

/**
 * The DevTools protocol over Chromium's --remote-debugging-pipe: JSON messages, each ended by a
 * NUL byte, read by the browser from its fd 3 and written to its fd 4. The service learns nothing
 * of where to connect from it: the pipes are the connection. What arrives is still hostile (a
 * workspace process may copy the browser's fd, or ptrace the browser): a message that is not
 * JSON, too long, not shaped as an answer or an event, an answer to no command sent, or one that
 * playwright chokes on ends the connection, and `broken` hears why (for the log, not the model).
 * An event well shaped but with params playwright does not expect is past what is checked here:
 * survivePlaywrightRejections keeps what playwright then throws from ending the service.
 */
export function cdpPipe(toBrowser: Duplex, fromBrowser: Duplex, broken: (why: Error) => void): ConnectOverCDPTransport {
  let pending: Buffer[] = []
  let pendingBytes = 0
  let closed = false
  // Commands sent and not answered yet: playwright asserts that an answer is to one of them.
  const unanswered = new Set<number>()
  const transport: ConnectOverCDPTransport = {
    send(message) {
      if (closed) return
      const { id } = message as { id?: unknown }
      if (typeof id === 'number') unanswered.add(id)
      toBrowser.write(`${JSON.stringify(message)}\0`)
    },
    close() {
      end()
    },
  }
  function end(why?: Error): void {
    if (closed) return
    closed = true
    if (why) broken(why)
    toBrowser.destroy()
    fromBrowser.destroy()
    transport.onclose?.(why ? 'the browser connection broke' : undefined)
  }
  function deliver(text: string): void {
    if (closed) return
    let message: unknown
    try {
      message = JSON.parse(text)
    } catch {
      return end(new Error('the browser sent a message that is not JSON'))
    }
    const why = refusal(message)
    if (why) return end(new Error(`the browser sent ${why}`))
    const { id } = message as { id?: number }
    if (id !== undefined && !unanswered.delete(id)) return end(new Error('the browser sent an answer to no command'))
    // Playwright asserts on what it does not expect, and its handler is async: a throw, or a
    // rejection nobody awaits, would end the service.
    const refused = (err: unknown) => end(new Error('the browser sent a message playwright refused', { cause: err }))
    try {
      const handled = transport.onmessage?.(message as object) as unknown
      if (handled instanceof Promise) handled.catch(refused)
    } catch (err) {
      refused(err)
    }
  }
  fromBrowser.on('data', (chunk: Buffer) => {
    let start = 0
    for (let nul = chunk.indexOf(0); nul !== -1 && !closed; nul = chunk.indexOf(0, start)) {
      const text = Buffer.concat([...pending, chunk.subarray(start, nul)]).toString('utf8')
      pending = []
      pendingBytes = 0
      start = nul + 1
      // One message a turn of the loop, in order, as playwright's own pipe hands them over.
      setImmediate(deliver, text)
    }
    if (closed || start === chunk.length) return
    pending.push(chunk.subarray(start))
    pendingBytes += chunk.length - start
    if (pendingBytes > MAX_MESSAGE) end(new Error(`the browser sent a message longer than ${MAX_MESSAGE} bytes`))
  })
  fromBrowser.on('close', () => end())
  fromBrowser.on('error', (err) => end(err))
  toBrowser.on('error', (err) => end(err))
  return transport
}
