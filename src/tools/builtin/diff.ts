/**
 * Unified line diffs (`--- a/p` / `+++ b/p` / `@@ -l,n +l,n @@`, 3 lines of context) that
 * `patch -p1` and `git apply` accept. Myers' algorithm over the lines between the common prefix
 * and suffix; past MAX_EDITS it gives up on minimality (not on correctness) and replaces the
 * whole middle, so a rewritten large file costs linear time, not quadratic.
 */

export const MAX_DIFF_CHARS = 64 * 1024
const CONTEXT = 3
const MAX_EDITS = 1000

type Op = { t: ' ' | '-' | '+'; line: string }

/** Lines with their terminator, so a missing final newline is a difference like any other. */
function splitLines(text: string): string[] {
  const lines = text.match(/[^\n]*\n|[^\n]+$/g)
  return lines ?? []
}

/** The shortest edit script from a to b, or null when it needs more than maxD edits. */
function myers(a: string[], b: string[], maxD: number): Op[] | null {
  const n = a.length
  const m = b.length
  const max = n + m
  const off = max + 1
  const v = new Int32Array(2 * max + 3)
  // trace[d] holds v[k] for k in [-d-1, d+1] as it was when step d began.
  const trace: Int32Array[] = []
  for (let d = 0; d <= Math.min(max, maxD); d++) {
    trace.push(v.slice(off - d - 1, off + d + 2))
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && v[off + k - 1]! < v[off + k + 1]!) ? v[off + k + 1]! : v[off + k - 1]! + 1
      let y = x - k
      while (x < n && y < m && a[x] === b[y]) {
        x++
        y++
      }
      v[off + k] = x
      if (x >= n && y >= m) return backtrack(a, b, trace)
    }
  }
  return null
}

function backtrack(a: string[], b: string[], trace: Int32Array[]): Op[] {
  const ops: Op[] = []
  let x = a.length
  let y = b.length
  for (let d = trace.length - 1; d >= 0; d--) {
    const t = trace[d]!
    const at = (k: number) => t[k + d + 1]!
    const k = x - y
    const prevK = k === -d || (k !== d && at(k - 1) < at(k + 1)) ? k + 1 : k - 1
    const prevX = at(prevK)
    const prevY = prevX - prevK
    while (x > prevX && y > prevY) {
      ops.push({ t: ' ', line: a[--x]! })
      y--
    }
    if (d > 0) {
      if (x === prevX) ops.push({ t: '+', line: b[--y]! })
      else ops.push({ t: '-', line: a[--x]! })
    }
  }
  return ops.reverse()
}

function editScript(a: string[], b: string[]): Op[] {
  let pre = 0
  while (pre < a.length && pre < b.length && a[pre] === b[pre]) pre++
  let suf = 0
  while (suf < a.length - pre && suf < b.length - pre && a[a.length - 1 - suf] === b[b.length - 1 - suf]) suf++
  const midA = a.slice(pre, a.length - suf)
  const midB = b.slice(pre, b.length - suf)
  const mid = myers(midA, midB, MAX_EDITS) ?? [...midA.map((line) => ({ t: '-' as const, line })), ...midB.map((line) => ({ t: '+' as const, line }))]
  const same = (line: string) => ({ t: ' ' as const, line })
  return [...a.slice(0, pre).map(same), ...mid, ...a.slice(a.length - suf).map(same)]
}

/** Groups changes whose gap is at most 2×CONTEXT equal lines into one hunk: [start, end) of ops. */
function hunkRanges(ops: Op[]): [number, number][] {
  const ranges: [number, number][] = []
  let start = -1
  let last = -1
  for (let i = 0; i < ops.length; i++) {
    if (ops[i]!.t === ' ') continue
    if (start >= 0 && i - last - 1 > 2 * CONTEXT) {
      ranges.push([start, Math.min(ops.length, last + CONTEXT + 1)])
      start = -1
    }
    if (start < 0) start = Math.max(0, i - CONTEXT)
    last = i
  }
  if (start >= 0) ranges.push([start, Math.min(ops.length, last + CONTEXT + 1)])
  return ranges
}

const lineOut = (t: string, line: string) => (line.endsWith('\n') ? `${t}${line}` : `${t}${line}\n\\ No newline at end of file\n`)

/**
 * The diff from oldText (null: the file did not exist) to newText for `path`, or '' when they
 * are equal. Capped at MAX_DIFF_CHARS on a line boundary, with a note saying how much was cut.
 */
export function unifiedDiff(path: string, oldText: string | null, newText: string): string {
  if (oldText === newText) return ''
  const ops = editScript(splitLines(oldText ?? ''), splitLines(newText))
  // Line numbers before each op, in the old and the new file.
  const oldAt = new Int32Array(ops.length + 1)
  const newAt = new Int32Array(ops.length + 1)
  for (let i = 0; i < ops.length; i++) {
    oldAt[i + 1] = oldAt[i]! + (ops[i]!.t !== '+' ? 1 : 0)
    newAt[i + 1] = newAt[i]! + (ops[i]!.t !== '-' ? 1 : 0)
  }
  const ranges = hunkRanges(ops)
  // A new empty file has no lines to show.
  if (ranges.length === 0) return ''
  const parts = [oldText === null ? '--- /dev/null\n' : `--- a/${path}\n`, `+++ b/${path}\n`]
  for (const [s, e] of ranges) {
    const oldCount = oldAt[e]! - oldAt[s]!
    const newCount = newAt[e]! - newAt[s]!
    // An empty side is numbered by the line before it (`-0,0` for a new file).
    const oldStart = oldCount === 0 ? oldAt[s]! : oldAt[s]! + 1
    const newStart = newCount === 0 ? newAt[s]! : newAt[s]! + 1
    parts.push(`@@ -${oldStart},${oldCount} +${newStart},${newCount} @@\n`)
    for (let i = s; i < e; i++) parts.push(lineOut(ops[i]!.t, ops[i]!.line))
  }
  return capDiff(parts.join(''))
}

function capDiff(text: string): string {
  if (text.length <= MAX_DIFF_CHARS) return text
  const cut = text.lastIndexOf('\n', MAX_DIFF_CHARS - 100) + 1
  return `${text.slice(0, cut)}[diff truncated: ${text.length - cut} more characters]\n`
}
