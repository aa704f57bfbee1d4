import { Readable } from 'node:stream'

export type TarEntry = { name: string; size: number; mtimeMs: number; mode?: number; open(): Promise<Readable> | Readable }

const BLOCK = 512
/** Largest value a 12-byte ustar numeric field holds (11 octal digits + NUL): 8 GiB - 1 bytes, or year 2242 for mtime. */
const MAX_OCTAL_12 = 0o77777777777

/** A POSIX tar of the entries, in order, streamed: each entry's bytes are read only when the archive reaches it. */
export function tarStream(entries: AsyncIterable<TarEntry> | Iterable<TarEntry>): Readable {
  // Readable.from pulls the generator only when the consumer asks for more, so a slow client keeps
  // just a chunk or two in memory rather than the archive; anything the generator throws (open(), a
  // source error, a size mismatch) destroys the output with that error, and destroying the output
  // returns the generator, which destroys the source it was reading.
  return Readable.from(archive(entries), { objectMode: false })
}

async function* archive(entries: AsyncIterable<TarEntry> | Iterable<TarEntry>): AsyncGenerator<Buffer> {
  for await (const entry of entries) yield* entryBlocks(entry)
  yield Buffer.alloc(2 * BLOCK) // end-of-archive marker
}

async function* entryBlocks(entry: TarEntry): AsyncGenerator<Buffer> {
  const { name, size } = entry
  if (!name || name.includes('\0')) throw new Error(`tar: invalid entry name ${JSON.stringify(name)}`)
  // An entry must never extract outside the folder it is extracted into.
  if (name.startsWith('/') || name.split('/').includes('..')) throw new Error(`tar: entry name ${JSON.stringify(name)} would leave the archive's folder`)
  if (!Number.isSafeInteger(size) || size < 0) throw new Error(`tar: invalid size ${size} for ${name}`)
  if (!Number.isFinite(entry.mtimeMs)) throw new Error(`tar: invalid mtime for ${name}`)
  // stat().mode carries the file-type bits too; a regular-file header wants only the permission bits.
  const mode = (entry.mode ?? 0o644) & 0o7777
  const mtime = Math.floor(entry.mtimeMs / 1000)

  // Whatever the ustar fields cannot say goes into a pax extended header, which readers apply to the next entry.
  const path = ustarPath(name)
  const pax: string[] = []
  if (!path) pax.push(paxRecord('path', name))
  if (size > MAX_OCTAL_12) pax.push(paxRecord('size', String(size)))
  if (mtime < 0 || mtime > MAX_OCTAL_12) pax.push(paxRecord('mtime', String(mtime)))
  // Stand-in name for readers without pax support: printable ASCII, the tail (it keeps the file name).
  const fallback = name.replace(/[^\x20-\x7e]/g, '_')
  if (pax.length) {
    const body = Buffer.from(pax.join(''), 'utf8')
    yield header({ name: `PaxHeader/${fallback.slice(-90)}`, mode: 0o644, size: body.length, mtime: clamp(mtime), type: 'x' })
    yield Buffer.concat([body, padding(body.length)])
  }
  yield header({ ...(path ?? { name: fallback.slice(-100) }), mode, size: size > MAX_OCTAL_12 ? 0 : size, mtime: clamp(mtime), type: '0' })

  const source = await entry.open()
  let read = 0
  for await (const chunk of source) {
    const buf: Buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk)
    read += buf.length
    // Check before yielding: the excess must never reach the archive, or a reader would misparse everything after it.
    if (read > size) throw new Error(`tar: ${name} yielded more than its declared ${size} bytes`)
    if (buf.length) yield buf
  }
  if (read !== size) throw new Error(`tar: ${name} yielded ${read} bytes, declared ${size}`)
  if (size % BLOCK) yield padding(size)
}

/** The ustar name/prefix for a printable-ASCII path, or null when only pax can carry it. */
function ustarPath(name: string): { name: string; prefix?: string } | null {
  // Non-ASCII names go to pax: ustar has no declared encoding, pax `path` is UTF-8 by definition.
  if (!/^[\x20-\x7e]+$/.test(name)) return null
  if (name.length <= 100) return { name }
  // Split at the first '/' that leaves ≤ 100 bytes after it; readers rejoin as prefix + '/' + name.
  for (let i = name.indexOf('/'); i !== -1 && i <= 155; i = name.indexOf('/', i + 1)) {
    const rest = name.length - i - 1
    // An empty prefix (leading '/') or empty name (trailing '/') would not rejoin to the same path.
    if (rest <= 100) return i > 0 && rest > 0 ? { prefix: name.slice(0, i), name: name.slice(i + 1) } : null
  }
  return null
}

/** "<len> key=value\n", where len is the byte length of the whole record, its own digits included. */
function paxRecord(key: string, value: string): string {
  const rest = Buffer.byteLength(` ${key}=${value}\n`)
  let len = rest + 1
  while (String(len).length + rest !== len) len = String(len).length + rest
  return `${len} ${key}=${value}\n`
}

type Header = { name: string; prefix?: string; mode: number; size: number; mtime: number; type: '0' | 'x' }

function header(h: Header): Buffer {
  const b = Buffer.alloc(BLOCK) // unused fields (linkname, uname, gname) stay NUL
  b.write(h.name, 0, 100, 'latin1') // names reaching here are ASCII
  octal(b, 100, 8, h.mode)
  octal(b, 108, 8, 0) // uid
  octal(b, 116, 8, 0) // gid
  octal(b, 124, 12, h.size)
  octal(b, 136, 12, h.mtime)
  b.write(h.type, 156, 'latin1')
  b.write('ustar\0' + '00', 257, 'latin1') // magic + version
  octal(b, 329, 8, 0) // devmajor
  octal(b, 337, 8, 0) // devminor
  b.write(h.prefix ?? '', 345, 155, 'latin1')
  // The checksum is the byte sum with its own field read as spaces, written as 6 octal digits, NUL, space.
  b.fill(' ', 148, 156)
  let sum = 0
  for (const byte of b) sum += byte
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'latin1')
  return b
}

/** Zero-padded octal digits filling the field, NUL-terminated. */
function octal(b: Buffer, offset: number, width: number, value: number): void {
  b.write(value.toString(8).padStart(width - 1, '0') + '\0', offset, width, 'latin1')
}

function clamp(seconds: number): number {
  return Math.min(Math.max(seconds, 0), MAX_OCTAL_12)
}

function padding(size: number): Buffer {
  return Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK)
}
