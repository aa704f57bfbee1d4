// The silent-failure check: a failure swallowed without a word is one nobody ever hears of. Every
// handler that drops an error on the floor (`.catch(() => {})`, `catch {}`, `.on('error', () => {})`)
// must say why dropping it is right, in a `//` comment on its own line or on the line just above;
// a failure an operator should see goes to the log instead (logFailure in src/shared/log.ts).
// Prints one line per unexplained one (file:line and the line) and exits 1 when any is found.
// Usage: node_modules/.bin/node scripts/check-catches.ts [SRC]
import fs from 'node:fs'
import path from 'node:path'

const SRC = path.resolve(process.argv[2] ?? path.join(import.meta.dirname, '..', 'src'))
const SILENT = /\.catch\(\(\) => \{\}\)|\bcatch \{\s*\}|\.on\('error', \(\) => \{\}\)/

function* sources(dir: string): Generator<string> {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const at = path.join(dir, entry.name)
    if (entry.isDirectory()) yield* sources(at)
    else if (entry.name.endsWith('.ts')) yield at
  }
}

/** A `//` comment after the code on the same line, or a comment line just above it. */
function explained(lines: string[], i: number): boolean {
  const line = lines[i]!
  const silent = line.search(SILENT)
  if (line.indexOf('//', silent) > silent) return true
  const above = lines[i - 1]?.trim() ?? ''
  return above.startsWith('//')
}

const unexplained: string[] = []
for (const file of sources(SRC)) {
  const lines = fs.readFileSync(file, 'utf8').split('\n')
  lines.forEach((line, i) => {
    if (SILENT.test(line) && !explained(lines, i)) unexplained.push(`${path.relative(SRC, file)}:${i + 1}: ${line.trim()}`)
  })
}
if (unexplained.length > 0) {
  process.stderr.write(`check-catches: ${unexplained.length} failure(s) dropped without a reason (say why in a // comment, or log it):\n${unexplained.map((l) => `  ${l}\n`).join('')}`)
  process.exit(1)
}
process.stdout.write('check-catches: ok\n')
