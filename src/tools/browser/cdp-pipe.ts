import type { Duplex } from 'node:stream'
import type { ConnectOverCDPTransport } from 'playwright-core'

/**
 * Most bytes one message may take (a full-page screenshot is a few MiB of base64): the pipe's
 * other end is reachable from the workspace (see SpawnRequest.extraFds), which could otherwise
 * send one endless message.
 */
const MAX_MESSAGE = 64 * 1024 * 1024

/**
 * The DevTools protocol over Chromium's --remote-debugging-pipe: JSON messages, each ended by a
 * NUL byte, read by the browser from its fd 3 and written to its fd 4. The service learns nothing
 * of where to connect from it: the pipes are the connection. What arrives is still hostile (a
 * workspace process may copy the browser's fd): a message that is not JSON, too long, or that
 * playwright chokes on ends the connection, and `broken` hears why (for the log, not the model).
 */
export function cdpPipe(toBrowser: Duplex, fromBrowser: Duplex, broken: (why: Error) => void): ConnectOverCDPTransport {
  let pending: Buffer[] = []
  let pendingBytes = 0
  let closed = false
  const transport: ConnectOverCDPTransport = {
    send(message) {
      if (!closed) toBrowser.write(`${JSON.stringify(message)}\0`)
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
    if (typeof message !== 'object' || message === null || Array.isArray(message)) return end(new Error('the browser sent a message that is not an object'))
    // Playwright asserts on what it does not expect: thrown here, it would end the service.
    try {
      transport.onmessage?.(message)
    } catch (err) {
      end(new Error('the browser sent a message playwright refused', { cause: err }))
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
