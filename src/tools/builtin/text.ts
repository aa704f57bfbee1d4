/** Content sniffing and output shaping shared by the built-in tools. */

const SNIFF_BYTES = 8 * 1024
/** Larger files get no diff: a diff of them would be capped to uselessness anyway. */
export const MAX_DIFF_SOURCE = 256 * 1024

/** The usual heuristic (git, grep): a NUL byte early on means binary. */
export function looksBinary(buf: Buffer): boolean {
  return buf.subarray(0, SNIFF_BYTES).includes(0)
}

/** Text worth a diff: not binary and not too large. */
export function diffable(buf: Buffer): boolean {
  return buf.length <= MAX_DIFF_SOURCE && !looksBinary(buf)
}

/**
 * Numbers as `toLocaleString('en-US')` writes them (1,234), through one formatter: toLocaleString
 * builds a formatter on every call, which every bash call's summary paid.
 */
const EN_US = new Intl.NumberFormat('en-US')
export const count = (n: number) => EN_US.format(n)

export const plural = (n: number, one: string, many = `${one}s`) => `${count(n)} ${n === 1 ? one : many}`

/**
 * Keeps the first and last `half` characters of a stream of text without holding all of it: a
 * command may print gigabytes, the model gets at most 2×half characters and a note of the cut.
 */
export class HeadTail {
  private head = ''
  private tail: string[] = []
  private tailLen = 0
  private readonly half: number
  total = 0
  newlines = 0
  last = ''

  constructor(half: number) {
    this.half = half
  }

  push(chunk: string): void {
    if (chunk === '') return
    this.total += chunk.length
    for (let i = chunk.indexOf('\n'); i >= 0; i = chunk.indexOf('\n', i + 1)) this.newlines++
    this.last = chunk.at(-1)!
    if (this.head.length < this.half) {
      const room = this.half - this.head.length
      this.head += chunk.slice(0, room)
      chunk = chunk.slice(room)
      if (chunk === '') return
    }
    this.tail.push(chunk)
    this.tailLen += chunk.length
    // Drop whole chunks only once the rest still covers `half`; the final cut is exact.
    while (this.tail.length > 1 && this.tailLen - this.tail[0]!.length >= this.half) this.tailLen -= this.tail.shift()!.length
  }

  /** Lines seen: newlines, plus an unterminated last line. */
  get lines(): number {
    return this.newlines + (this.total > 0 && this.last !== '\n' ? 1 : 0)
  }

  text(): string {
    let tail = this.tail.join('')
    if (this.total <= 2 * this.half) return this.head + tail
    tail = tail.slice(tail.length - this.half)
    const cut = this.total - this.head.length - tail.length
    return `${this.head}\n\n[… ${count(cut)} characters cut from the middle of the output …]\n\n${tail}`
  }
}
