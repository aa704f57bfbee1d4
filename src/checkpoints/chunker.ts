import { createHash } from 'node:crypto'

/**
 * Content-defined chunk boundaries for large files: FastCDC (Xia et al., USENIX ATC 2016) with a
 * gear rolling hash and normalized chunking. A boundary falls where the hash of the last 32 bytes
 * meets a mask, so it depends on the bytes around it, not on its offset: bytes inserted or
 * rewritten in the middle of a file move or change only the chunks around them, and the rest
 * are the same contents as before. Our own short implementation: the npm registry holds no
 * maintained FastCDC package (only Rabin fingerprinting bindings, native or WebAssembly, for IPFS),
 * and the loop below is all there is to it.
 *
 * The table and the sizes must never change: chunks cut another way would share nothing with the
 * ones already stored (still correct, only stored twice).
 */
export const MIN_CHUNK = 256 * 1024
export const AVG_CHUNK = 1024 * 1024
export const MAX_CHUNK = 4 * 1024 * 1024

/** 256 fixed pseudo-random 32-bit values, one per byte value, derived from a fixed seed. */
const GEAR = (() => {
  const table = new Int32Array(256)
  for (let i = 0; i < 256; i++) table[i] = createHash('sha256').update(`warren gear ${i}`).digest().readInt32LE(0)
  return table
})()

// The hash shifts left one bit per byte: its high bits see the most bytes, so the masks take
// those. Before AVG_CHUNK a stricter mask (22 bits), after it a looser one (18): chunk sizes
// cluster around the average (FastCDC's normalization, level 2).
const MASK_STRICT = 0xfffffc00 | 0
const MASK_LOOSE = 0xffffc000 | 0

/**
 * Where the first chunk of `data[0, length)` ends: `length` itself when no boundary falls before
 * it (the caller passes the file's last bytes, or MAX_CHUNK of them).
 */
export function cutPoint(data: Uint8Array, length: number): number {
  const n = Math.min(length, MAX_CHUNK)
  if (n <= MIN_CHUNK) return n
  const normal = Math.min(AVG_CHUNK, n)
  let h = 0
  let i = MIN_CHUNK
  for (; i < normal; i++) {
    h = ((h << 1) + GEAR[data[i]!]!) | 0
    if ((h & MASK_STRICT) === 0) return i + 1
  }
  for (; i < n; i++) {
    h = ((h << 1) + GEAR[data[i]!]!) | 0
    if ((h & MASK_LOOSE) === 0) return i + 1
  }
  return n
}
