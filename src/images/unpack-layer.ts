import { createHash } from 'node:crypto'
import type { Readable } from 'node:stream'
import { Transform, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import zlib from 'node:zlib'
import { Parser } from 'tar'
import { ImagePullError } from './image-pull-error.ts'
import { LayerWriter } from './layer-writer.ts'
import { LAYER_COMPRESSION, type Descriptor } from './oci-manifest.ts'

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

/** Hashes and counts what passes; `limit` bytes at most, or `tooBig` is thrown. */
function meter(limit: number, tooBig: () => ImagePullError) {
  const hash = createHash('sha256')
  let bytes = 0
  const stream = new Transform({
    transform(chunk: Buffer, _enc, done) {
      bytes += chunk.length
      if (bytes > limit) return done(tooBig())
      hash.update(chunk)
      done(null, chunk)
    },
  })
  let digest: string | undefined
  return { stream, digest: () => (digest ??= `sha256:${hash.digest('hex')}`), bytes: () => bytes }
}

/**
 * Streams one layer blob into `dir`: the compressed bytes are counted against the descriptor's
 * size and hashed against its digest, decompressed, hashed against the config's diff_id and
 * parsed as tar by node-tar's parser (long names, pax headers), whose entries the LayerWriter
 * writes under the OCI layer rules. Nothing is buffered whole. Throws an ImagePullError; the
 * caller removes the folder then (it is a temporary one until the layer is whole and verified).
 */
export async function unpackLayer(body: Readable, opts: UnpackOptions): Promise<{ entries: number }> {
  const { layer } = opts
  const what = `layer ${layer.digest}`
  const compressed = meter(layer.size, () => new ImagePullError('too_large', `${what} is longer than the ${layer.size} bytes its manifest says`))
  compressed.stream.on('data', (chunk: Buffer) => opts.onBytes?.(chunk.length))
  const unpacked = meter(opts.maxUnpackedBytes, () => new ImagePullError('too_large', `${what} decompresses to more than ${opts.maxUnpackedBytes} bytes`))
  const compression = LAYER_COMPRESSION[layer.mediaType]
  const stages: (Transform | zlib.Gunzip | zlib.ZstdDecompress)[] = []
  if (compression === 'gzip') stages.push(zlib.createGunzip())
  else if (compression === 'zstd') stages.push(zlib.createZstdDecompress())

  const writer = new LayerWriter(opts.dir, opts.maxUnpackedBytes)
  // Decompression is ours alone: the parser must not sniff and decompress a second time (a
  // gzip inside the gzip would escape the ceiling on decompressed bytes); strict turns its
  // warnings (bad checksums, truncated archives) into errors.
  const parser = new Parser({ strict: true, zstd: false, brotli: false } as ConstructorParameters<typeof Parser>[0])
  let sniffed = false
  const parsed = new Promise<void>((resolve, reject) => {
    parser.on('entry', (entry) => writer.entry(entry))
    parser.on('error', reject)
    parser.on('end', () => resolve())
  })
  // An unhandled rejection if the pipeline fails first; the pipeline's error is the one reported.
  parsed.catch(() => {})
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
    await pipeline(body, compressed.stream, ...stages, unpacked.stream, sink)
  } catch (err) {
    writer.abandon()
    if (err instanceof ImagePullError) throw err
    if ((err as NodeJS.ErrnoException).code?.startsWith('Z_') || (err as NodeJS.ErrnoException).code === 'ERR_ZSTD_INVALID_PARAM') {
      throw new ImagePullError('registry_error', `${what} does not decompress as ${compression} (${(err as Error).message})`, { cause: err })
    }
    if ((err as { code?: string }).code?.startsWith('TAR_')) throw new ImagePullError('unsafe_layer', `${what} is not a valid tar archive: ${(err as Error).message}`, { cause: err })
    throw err
  }
  if (compressed.bytes() !== layer.size) throw new ImagePullError('digest_mismatch', `${what} is ${compressed.bytes()} bytes, not the ${layer.size} its manifest says`)
  if (compressed.digest() !== layer.digest) throw new ImagePullError('digest_mismatch', `${what}'s bytes hash to ${compressed.digest()}`)
  if (unpacked.digest() !== opts.diffId) throw new ImagePullError('digest_mismatch', `${what} decompresses to a tar that hashes to ${unpacked.digest()}, not the config's ${opts.diffId}`)
  await writer.finish()
  return { entries: writer.entries }
}
