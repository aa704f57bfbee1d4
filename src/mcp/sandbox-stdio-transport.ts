import { finished } from 'node:stream/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js'
import type { SandboxProcess } from '../sandbox/sandbox.ts'

/** How long a server's exit waits for the rest of its stderr. */
const STDERR_WAIT_MS = 1000
/** What a local server wrote to stderr last, for the reason shown when it fails. */
const STDERR_TAIL = 2000
/** One message at most: a server (code in the sandbox) that writes without end is stopped, not buffered. */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024

/**
 * The MCP stdio transport over a process in the session's sandbox: newline-delimited JSON-RPC on
 * its stdin and stdout. The SDK's own stdio transport spawns on the host, which a local server
 * must never run on.
 */
export class SandboxStdioTransport implements Transport {
  onclose?: () => void
  onerror?: (error: Error) => void
  onmessage?: <T extends JSONRPCMessage>(message: T) => void
  private proc: SandboxProcess | null = null
  private readonly buffer = new ReadBuffer()
  private stderr = ''
  private closed = false
  private readonly launch: () => Promise<SandboxProcess>

  constructor(launch: () => Promise<SandboxProcess>) {
    this.launch = launch
  }

  /** The end of what the server wrote to stderr: why it failed, in its own words. */
  get stderrTail(): string {
    return this.stderr.trim()
  }

  async start(): Promise<void> {
    const proc = await this.launch()
    this.proc = proc
    let pending = 0
    proc.stdout.on('data', (chunk: Buffer) => {
      const newline = chunk.lastIndexOf(0x0a)
      pending = newline < 0 ? pending + chunk.length : chunk.length - newline - 1
      if (pending > MAX_MESSAGE_BYTES) {
        this.onerror?.(new Error(`the server wrote a message over ${MAX_MESSAGE_BYTES} bytes; it was stopped`))
        void this.close()
        return
      }
      this.buffer.append(chunk)
      for (;;) {
        let message: JSONRPCMessage | null
        try {
          message = this.buffer.readMessage()
        } catch (err) {
          this.onerror?.(err as Error)
          continue
        }
        if (message === null) break
        this.onmessage?.(message)
      }
    })
    proc.stderr.on('data', (chunk: Buffer) => (this.stderr = (this.stderr + chunk.toString('utf8')).slice(-STDERR_TAIL)))
    proc.stdin.on('error', (err: Error) => this.onerror?.(err))
    void proc.exited.then(async (code) => {
      // Its last words may still be on their way when its exit is reported: they are read to the
      // end of stderr first, for a second at most (a process it left behind may hold stderr open).
      await Promise.race([finished(proc.stderr).catch(() => {}) /* an error ends the reading: what came is kept */, sleep(STDERR_WAIT_MS)])
      if (!this.closed && code !== 0) this.onerror?.(new Error(`the server exited${code === null ? ' on a signal' : ` with code ${code}`}${this.stderrTail ? `: ${this.stderrTail}` : ''}`))
      this.finish()
    })
  }

  async send(message: JSONRPCMessage): Promise<void> {
    const proc = this.proc
    if (!proc || this.closed) throw new Error('the server is not running')
    await new Promise<void>((resolve, reject) => proc.stdin.write(serializeMessage(message), (err) => (err ? reject(err) : resolve())))
  }

  async close(): Promise<void> {
    if (this.proc) await this.proc.kill()
    this.finish()
  }

  private finish(): void {
    if (this.closed) return
    this.closed = true
    this.onclose?.()
  }
}
