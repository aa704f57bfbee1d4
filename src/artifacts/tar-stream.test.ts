import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { setImmediate as tick } from 'node:timers/promises'
import { tarStream, type TarEntry } from './tar-stream.ts'

const MTIME = Date.UTC(2024, 0, 2, 3, 4, 5) + 678 // the milliseconds must be dropped, not rounded

const contents = new Map<string, Buffer>()

function file(name: string, data: Buffer | string, mode?: number): TarEntry {
  const bytes = Buffer.from(data)
  contents.set(name, bytes)
  return { name, size: bytes.length, mtimeMs: MTIME, mode, open: () => Readable.from([bytes]) }
}

async function collect(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk)
  return Buffer.concat(chunks)
}

/** Runs GNU tar on the archive in a temp dir; `fn` gets the dir (with the archive extracted into `out/`). */
function withSystemTar<T>(archive: Buffer, fn: (dir: string, tar: (...args: string[]) => string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), 'tar-stream-'))
  try {
    writeFileSync(join(dir, 'a.tar'), archive)
    const tar = (...args: string[]) =>
      execFileSync('tar', [...args, '-f', join(dir, 'a.tar')], { env: { ...process.env, TZ: 'UTC', LC_ALL: 'C' } }).toString('utf8')
    execFileSync('mkdir', [join(dir, 'out')])
    tar('-x', '-p', '-C', join(dir, 'out'))
    return fn(join(dir, 'out'), tar)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

function pattern(size: number, seed: number): Buffer {
  const b = Buffer.alloc(size)
  for (let i = 0; i < size; i++) b[i] = (i * 31 + seed) & 0xff
  return b
}

describe('tarStream', () => {
  it('writes an archive GNU tar lists and extracts byte for byte, with names, modes and mtimes intact', async () => {
    const long150 = `${'d'.repeat(60)}/${'e'.repeat(40)}/${'f'.repeat(48)}` // 150 chars: needs the prefix split
    const long300 = `${'g'.repeat(99)}/${'h'.repeat(99)}/${'i'.repeat(100)}` // 300 chars: needs pax
    const files = [
      file('hello.txt', 'hello\n'),
      file('empty', ''),
      file('exact512.bin', pattern(512, 1)),
      file('over513.bin', pattern(513, 2), 0o755),
      file('a/b/c.txt', 'nested'),
      file(long150, 'prefix split'),
      file(long300, 'pax path'),
      file('données/résumé ü.txt', 'utf-8 name'),
    ]
    assert.equal(long150.length, 150)
    assert.equal(long300.length, 300)
    const archive = await collect(tarStream(files))
    assert.equal(archive.length % 512, 0)
    assert.ok(archive.subarray(-1024).equals(Buffer.alloc(1024)), 'ends with two zero blocks')

    withSystemTar(archive, (out, tar) => {
      const names = tar('-t', '--quoting-style=literal').trimEnd().split('\n')
      assert.deepEqual(names, files.map(f => f.name))
      const verbose = tar('-tv', '--quoting-style=literal').trimEnd().split('\n')
      assert.match(verbose[0], /^-rw-r--r-- 0\/0 +6 2024-01-02 03:04 hello\.txt$/)
      assert.match(verbose[3], /^-rwxr-xr-x 0\/0 +513 2024-01-02 03:04 over513\.bin$/)
      for (const f of files) {
        const path = join(out, f.name)
        assert.ok(readFileSync(path).equals(contents.get(f.name)!), `contents of ${f.name}`)
        const st = statSync(path)
        assert.equal(st.mtimeMs, Math.floor(MTIME / 1000) * 1000, `mtime of ${f.name}`)
        assert.equal(st.mode & 0o7777, f.mode ?? 0o644, `mode of ${f.name}`)
      }
    })

    // The 150-char path used the ustar prefix field, not pax; the 300-char one got a pax header.
    const headers = headersOf(archive)
    const split = headers.find(h => h.prefix)!
    assert.equal(split.type, '0')
    assert.equal(`${split.prefix}/${split.name}`, long150)
    const pax = headers.filter(h => h.type === 'x').map(h => parsePax(h.body))
    assert.deepEqual(pax, [{ path: long300 }, { path: 'données/résumé ü.txt' }], 'pax for the 300-char and the UTF-8 names only')
  })

  it('computes the header checksum per the standard', async () => {
    const archive = await collect(tarStream([file('check.txt', 'abc')]))
    const header = Buffer.from(archive.subarray(0, 512))
    assert.equal(header.toString('latin1', 154, 156), '\0 ', 'six digits, NUL, space')
    const stored = parseInt(header.toString('latin1', 148, 154), 8)
    header.fill(' ', 148, 156)
    assert.equal(stored, header.reduce((sum, byte) => sum + byte, 0))
    assert.equal(archive.toString('latin1', 257, 265), 'ustar\x0000')
    assert.equal(archive.toString('latin1', 136, 148), `${Math.floor(MTIME / 1000).toString(8).padStart(11, '0')}\0`)
  })

  it('streams: a big entry flows through in chunks and the next entry is opened only after it was consumed', async () => {
    const SIZE = 3 * 1024 * 1024
    const CHUNK = 64 * 1024
    const data = pattern(SIZE, 7)
    let produced = 0
    let consumed = 0
    let maxAhead = 0
    let consumedWhenSecondOpened = -1
    const big: TarEntry = {
      name: 'big.bin',
      size: SIZE,
      mtimeMs: MTIME,
      open: () =>
        new Readable({
          read() {
            maxAhead = Math.max(maxAhead, produced - consumed)
            const chunk = data.subarray(produced, produced + CHUNK)
            produced += chunk.length
            this.push(chunk.length ? chunk : null)
          },
        }),
    }
    const second: TarEntry = {
      ...file('second.txt', 'after'),
      open: () => {
        consumedWhenSecondOpened = consumed
        return Readable.from([Buffer.from('after')])
      },
    }
    const chunks: Buffer[] = []
    for await (const chunk of tarStream([big, second])) {
      chunks.push(chunk)
      consumed += chunk.length
      await tick() // a slow consumer
    }
    assert.ok(consumedWhenSecondOpened >= 512 + SIZE - 512 * 1024, `second opened after ${consumedWhenSecondOpened} bytes were consumed`)
    assert.ok(maxAhead <= 1024 * 1024, `the source ran at most ${maxAhead} bytes ahead of the consumer`)
    withSystemTar(Buffer.concat(chunks), out => {
      assert.ok(readFileSync(join(out, 'big.bin')).equals(data))
      assert.equal(readFileSync(join(out, 'second.txt'), 'utf8'), 'after')
    })
  })

  it('errors instead of writing a corrupt archive when an entry yields more or fewer bytes than its size', async () => {
    for (const actual of ['toolong', 'shrt']) {
      const entry: TarEntry = { name: 'x.txt', size: 5, mtimeMs: MTIME, open: () => Readable.from([Buffer.from(actual)]) }
      await assert.rejects(collect(tarStream([entry, file('next', 'n')])), /x\.txt yielded/)
    }
  })

  it('destroys the output with the error of open() or of the source stream', async () => {
    const boom = new Error('boom')
    const failingOpen: TarEntry = { name: 'a', size: 1, mtimeMs: MTIME, open: async () => Promise.reject(boom) }
    await assert.rejects(collect(tarStream([failingOpen])), e => e === boom)
    const failingSource: TarEntry = {
      name: 'b',
      size: 10,
      mtimeMs: MTIME,
      open: () =>
        new Readable({
          read() {
            this.destroy(boom)
          },
        }),
    }
    await assert.rejects(collect(tarStream([failingSource])), e => e === boom)
  })

  it('puts sizes of 8 GiB and more in a pax size record, and destroys the source when the consumer stops', async () => {
    const SIZE = 8 * 1024 ** 3
    const source = new Readable({
      read() {
        this.push(Buffer.alloc(64 * 1024))
      },
    })
    const out = tarStream([{ name: 'huge.bin', size: SIZE, mtimeMs: MTIME, open: () => source }])
    const chunks: Buffer[] = []
    let got = 0
    for await (const chunk of out) {
      chunks.push(chunk)
      if ((got += chunk.length) > 4 * 512) break // leaving the loop destroys the output
    }
    const headers = headersOf(Buffer.concat(chunks).subarray(0, 1536))
    assert.equal(headers[0].type, 'x')
    assert.deepEqual(parsePax(headers[0].body), { size: String(SIZE) })
    assert.equal(headers[1].name, 'huge.bin')
    await tick()
    assert.ok(source.destroyed, 'the source stream is destroyed with the output')
  })
})

type ParsedHeader = { name: string; prefix: string; type: string; size: number; body: Buffer }

/** Walks the archive's headers (ustar fields only) the way a reader would. */
function headersOf(archive: Buffer): ParsedHeader[] {
  const headers: ParsedHeader[] = []
  for (let at = 0; at + 512 <= archive.length; ) {
    const h = archive.subarray(at, at + 512)
    if (h.every(b => b === 0)) break
    const field = (start: number, len: number) => h.toString('utf8', start, start + len).replace(/\0.*$/s, '')
    const size = parseInt(field(124, 12), 8)
    headers.push({ name: field(0, 100), prefix: field(345, 155), type: field(156, 1), size, body: archive.subarray(at + 512, at + 512 + size) })
    at += 512 + Math.ceil(size / 512) * 512
  }
  return headers
}

/** Parses pax records, checking each one's length prefix counts the whole record. */
function parsePax(body: Buffer): Record<string, string> {
  const out: Record<string, string> = {}
  for (let at = 0; at < body.length; ) {
    const space = body.indexOf(0x20, at)
    const len = Number(body.toString('latin1', at, space))
    const record = body.subarray(at, at + len)
    assert.equal(record.at(-1), 0x0a, 'record ends with a newline at its declared length')
    const text = record.toString('utf8', space - at + 1, len - 1)
    const eq = text.indexOf('=')
    out[text.slice(0, eq)] = text.slice(eq + 1)
    at += len
  }
  return out
}
