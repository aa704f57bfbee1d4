import type { SpawnedProcess } from './spawner.ts'
import type { Readable } from 'node:stream'
import type { ExecRequest, ExecResult } from '../sandbox.ts'

/** Output kept per stream for the result; callbacks still see all of it. */
export const MAX_KEPT_OUTPUT = 32 * 1024 * 1024
/**
 * After the command exits, how long to wait for the rest of its output. A background process
 * it started (`server &`) inherits the pipes and holds them open, so their end cannot be awaited.
 */
const DRAIN_MS = 25

export type RunOptions = {
  /** The command's process, just started (a parked shell that exec'd the command chain). */
  child: SpawnedProcess
  req: ExecRequest
  signal?: AbortSignal
  /** Kills the command's whole process tree (its exec cgroup, or its process group). */
  killTree: (pid: number | undefined) => Promise<void>
}

export function runCommand(o: RunOptions): Promise<ExecResult> {
  const { req, signal, child } = o
  const out = collector(child.stdout!, req.onStdout)
  const err = collector(child.stderr!, req.onStderr)
  let timedOut = false
  let aborted = false
  let killing: Promise<void> | null = null
  const kill = () => {
    killing ??= o.killTree(child.pid).catch(() => {}) // a tree already gone is the usual failure; the command's end is awaited all the same
  }
  const timer =
    req.timeoutMs !== undefined && req.timeoutMs > 0
      ? setTimeout(() => {
          timedOut = true
          kill()
        }, req.timeoutMs)
      : null
  const onAbort = () => {
    aborted = true
    kill()
  }
  // It may have fired while the sandbox was getting the command ready.
  if (signal?.aborted) onAbort()
  else signal?.addEventListener('abort', onAbort, { once: true })

  return new Promise<ExecResult>((resolve, reject) => {
    const finish = () => {
      if (timer) clearTimeout(timer)
      signal?.removeEventListener('abort', onAbort)
    }
    child.on('error', (e) => {
      finish()
      reject(e)
    })
    child.on('exit', (code, sig) => {
      finish()
      const done = () => {
        out.stop()
        err.stop()
        resolve({ exitCode: code, signal: sig, timedOut, aborted, stdout: out.buffer(), stderr: err.buffer() })
      }
      // The timer may fire before the loop has polled the pipes since the exit (a busy loop, a
      // loaded host): one poll phase (setImmediate runs after it) reads what the command wrote.
      const grace = setTimeout(() => setImmediate(done), DRAIN_MS)
      Promise.all([out.ended, err.ended]).then(() => {
        clearTimeout(grace)
        done()
      })
    })
  })
}

function collector(stream: Readable, onChunk?: (chunk: Buffer) => void) {
  const chunks: Buffer[] = []
  let kept = 0
  let live = true
  stream.on('data', (chunk: Buffer) => {
    if (!live) return
    if (kept < MAX_KEPT_OUTPUT) {
      const part = kept + chunk.length > MAX_KEPT_OUTPUT ? chunk.subarray(0, MAX_KEPT_OUTPUT - kept) : chunk
      chunks.push(part)
      kept += part.length
    }
    try {
      onChunk?.(chunk)
    } catch {
      /* a caller's callback must not break the command */
    }
  })
  stream.on('error', () => {}) // a pipe error ends the stream, and the child's exit is what reports the command
  // The end of the data, not the close of the pipe, which can come a loop turn or more later.
  const ended = new Promise<void>((r) => {
    stream.once('end', () => r())
    stream.once('close', () => r())
  })
  return {
    ended,
    // Later output of background processes is read and dropped, so they never block on a full pipe.
    stop: () => {
      live = false
    },
    buffer: () => Buffer.concat(chunks),
  }
}

/** The result of a command that never ran because its signal had already fired. */
export function abortedResult(): ExecResult {
  return { exitCode: null, signal: null, timedOut: false, aborted: true, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) }
}
