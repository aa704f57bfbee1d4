import { createHash } from 'node:crypto'
import type { Readable } from 'node:stream'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { Worker } from 'node:worker_threads'
import { ImagePullError, type ImagePullReason } from './image-pull-error.ts'
import { LAYER_COMPRESSION, type Descriptor } from './oci-manifest.ts'
import type { FromWorker, ToWorker, UnpackJob } from './unpack-worker.ts'

export type UnpackOptions = {
  /** An empty folder of the service's own to unpack into. */
  dir: string
  layer: Descriptor
  /** The uncompressed tar's digest, from the image config (rootfs.diff_ids). */
  diffId: string
  /** Most bytes the tar may hold once decompressed (a small download can decompress to a lot). */
  maxUnpackedBytes: number
  /** Called with the compressed bytes as they arrive. */
  onBytes?: (n: number) => void
}

/** Compressed bytes sent to the worker and not yet taken in: enough to keep it busy, never the whole layer. */
const IN_FLIGHT_BYTES = 1024 * 1024

/**
 * Streams one layer blob into `dir`. Here the compressed bytes are counted against the
 * descriptor's size and hashed against its digest; a worker thread (unpack-worker.ts)
 * decompresses them, hashes the tar against the config's diff_id and writes its entries under the
 * OCI layer rules (LayerWriter), so the service's event loop never waits on the file system.
 * Nothing is buffered whole. Throws an ImagePullError; the caller removes the folder then (it is a
 * temporary one until the layer is whole and verified), which it may do at once: the worker has
 * stopped by the time this returns or throws.
 */
export async function unpackLayer(body: Readable, opts: UnpackOptions): Promise<{ entries: number }> {
  const { layer } = opts
  const what = `layer ${layer.digest}`
  const job: UnpackJob = { dir: opts.dir, compression: LAYER_COMPRESSION[layer.mediaType] ?? 'none', maxUnpackedBytes: opts.maxUnpackedBytes, what }
  const worker = new Worker(new URL('./unpack-worker.ts', import.meta.url), { workerData: job })
  const hash = createHash('sha256')
  let bytes = 0
  let inFlight = 0
  let resume: (() => void) | undefined
  const result = new Promise<{ diffId: string; entries: number }>((resolve, reject) => {
    worker.on("message", (m: FromWorker) => {
      if ('ack' in m) {
        inFlight -= m.ack
        if (inFlight < IN_FLIGHT_BYTES && resume) {
          // Cleared before the call: done() may write the next chunk at once, which can set it again.
          const r = resume
          resume = undefined
          r()
        }
      } else if ('done' in m) resolve(m.done)
      else reject(new ImagePullError((m.failed.reason as ImagePullReason | undefined) ?? 'unsafe_layer', m.failed.message))
    })
    worker.on('error', reject)
    worker.on('exit', (code) => reject(new Error(`the unpacking worker exited (${code}) before answering`)))
  })
  // A failure here while the pipeline still runs is reported by the pipeline's own failure below.
  result.catch(() => {})
  const toWorker = new Writable({
    write(chunk: Buffer, _enc, done) {
      bytes += chunk.length
      if (bytes > layer.size) return done(new ImagePullError('too_large', `${what} is longer than the ${layer.size} bytes its manifest says`))
      hash.update(chunk)
      opts.onBytes?.(chunk.length)
      inFlight += chunk.length
      worker.postMessage({ chunk } satisfies ToWorker)
      if (inFlight < IN_FLIGHT_BYTES) return done()
      resume = () => done()
    },
    final(done) {
      worker.postMessage({ end: true } satisfies ToWorker)
      done()
    },
  })
  try {
    // Whichever fails first: the download (or its size check), or the worker (a hostile entry).
    await Promise.race([pipeline(body, toWorker), result.then(() => new Promise(() => {}))])
    const unpacked = await result
    if (bytes !== layer.size) throw new ImagePullError('digest_mismatch', `${what} is ${bytes} bytes, not the ${layer.size} its manifest says`)
    const digest = `sha256:${hash.digest('hex')}`
    if (digest !== layer.digest) throw new ImagePullError('digest_mismatch', `${what}'s bytes hash to ${digest}`)
    if (unpacked.diffId !== opts.diffId) throw new ImagePullError('digest_mismatch', `${what} decompresses to a tar that hashes to ${unpacked.diffId}, not the config's ${opts.diffId}`)
    return { entries: unpacked.entries }
  } catch (err) {
    body.destroy()
    throw err
  } finally {
    await worker.terminate()
  }
}
