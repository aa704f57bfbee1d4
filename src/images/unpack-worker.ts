import { createHash } from 'node:crypto'
import { Readable, Transform, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { parentPort, workerData } from 'node:worker_threads'
import zlib from 'node:zlib'
import { Parser } from 'tar'
import { ImagePullError } from './image-pull-error.ts'
import { LayerWriter } from './layer-writer.ts'

/**
 * The worker thread that decompresses and unpacks one layer (see unpackLayer): file-system
 * writes are synchronous (LayerWriter), so they run here, off the service's event loop. The
 * compressed bytes come as messages, acknowledged by their length once taken in (the stream may
 * join chunks, so bytes are counted, not messages), so at most a few are ever queued; the answer is the uncompressed tar's digest, or the failure as reason and message.
 */

export type UnpackJob = { dir: string; compression: 'gzip' | 'zstd' | 'none'; maxUnpackedBytes: number; what: string }
/** From the service: a chunk of the compressed blob, or its end. */
export type ToWorker = { chunk: Uint8Array } | { end: true }
/** To the service. */
export type FromWorker = { ack: number } | { done: { diffId: string; entries: number } } | { failed: { reason: string | undefined; message: string } }

const job = workerData as UnpackJob
const port = parentPort!
const post = (m: FromWorker) => port.postMessage(m)

/** The compressed bytes as a stream, their length acknowledged when the pipeline has taken them. */
const input = new Readable({ read() {} })
port.on('message', (m: ToWorker) => {
  if ('end' in m) input.push(null)
  else input.push(Buffer.from(m.chunk.buffer, m.chunk.byteOffset, m.chunk.byteLength))
})
const acks = new Transform({
  transform(chunk: Buffer, _enc, done) {
    post({ ack: chunk.length })
    done(null, chunk)
  },
})

async function unpack(): Promise<{ diffId: string; entries: number }> {
  const { what } = job
  const hash = createHash('sha256')
  let bytes = 0
  const unpacked = new Transform({
    transform(chunk: Buffer, _enc, done) {
      bytes += chunk.length
      if (bytes > job.maxUnpackedBytes) return done(new ImagePullError('too_large', `${what} decompresses to more than ${job.maxUnpackedBytes} bytes`))
      hash.update(chunk)
      done(null, chunk)
    },
  })
  const stages: Transform[] = job.compression === 'gzip' ? [zlib.createGunzip()] : job.compression === 'zstd' ? [zlib.createZstdDecompress()] : []
  const writer = new LayerWriter(job.dir, job.maxUnpackedBytes)
  // Decompression is ours alone: the parser must not sniff and decompress a second time (a gzip
  // inside the gzip would escape the ceiling on decompressed bytes); strict turns its warnings
  // (bad checksums, truncated archives) into errors.
  const parser = new Parser({ strict: true, zstd: false, brotli: false } as ConstructorParameters<typeof Parser>[0])
  const parsed = new Promise<void>((resolve, reject) => {
    parser.on('entry', (entry) => writer.entry(entry))
    parser.on('error', reject)
    parser.on('end', () => resolve())
  })
  // An unhandled rejection if the pipeline fails first; the pipeline's error is the one reported.
  parsed.catch(() => {})
  let sniffed = false
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      try {
        if (!sniffed) {
          sniffed = true
          if (chunk[0] === 0x1f && chunk[1] === 0x8b) throw new ImagePullError('unsafe_layer', `${what} is compressed twice`)
        }
        if (parser.write(chunk)) done()
        else parser.once('drain', () => done())
      } catch (err) {
        done(err as Error)
      }
    },
    final(done) {
      try {
        parser.end()
      } catch (err) {
        return done(err as Error)
      }
      parsed.then(() => done(), done)
    },
  })
  try {
    await pipeline(input, acks, ...stages, unpacked, sink)
  } catch (err) {
    writer.abandon()
    if (err instanceof ImagePullError) throw err
    const code = (err as NodeJS.ErrnoException).code ?? ''
    if (code.startsWith('Z_') || code.startsWith('ERR_ZSTD')) throw new ImagePullError('registry_error', `${what} does not decompress as ${job.compression} (${(err as Error).message})`, { cause: err })
    if (code.startsWith('TAR_')) throw new ImagePullError('unsafe_layer', `${what} is not a valid tar archive: ${(err as Error).message}`, { cause: err })
    throw err
  }
  await writer.finish()
  return { diffId: `sha256:${hash.digest('hex')}`, entries: writer.entries }
}

unpack().then(
  (done) => post({ done }),
  (err: unknown) => post({ failed: { reason: err instanceof ImagePullError ? err.reason : undefined, message: err instanceof Error ? err.message : String(err) } }),
)
