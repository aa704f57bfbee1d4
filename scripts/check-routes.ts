// Routes stay thin: a `*.routes.ts` file validates, calls one operation or store function and
// shapes the answer. Transactions, event recording and query building belong to operations
// (`<verb>-<noun>.ts`) and stores, where they can be reused and tested without HTTP.
//
//   node_modules/.bin/node scripts/check-routes.ts [folder]   (default: src)
//
// Prints one line per violation and exits 1 when there is any; test/check-routes.test.ts runs it
// over the tree, so `npm test` enforces it.
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'

const RULES: [pattern: RegExp, what: string, instead: string][] = [
  [/\bwithEvents\b/, 'withEvents', 'opens a transaction that records events: move it into an operation (<verb>-<noun>.ts)'],
  [/\brecordEvent\b/, 'recordEvent', 'records an event: move it into an operation (<verb>-<noun>.ts)'],
  [/\.transaction\(/, '.transaction(', 'opens a transaction: move it into an operation (<verb>-<noun>.ts)'],
  [/\b(selectFrom|insertInto|updateTable|deleteFrom)\b/, 'query building', 'builds a query: move it into a store (<domain>.store.ts)'],
  [/\bsql`/, 'sql`', 'writes SQL: move it into a store (<domain>.store.ts)'],
]

function routeFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name)
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : routeFiles(path)
    return e.name.endsWith('.routes.ts') ? [path] : []
  })
}

// A mention in a comment is no violation; a whole-line comment is skipped (trailing ones are not,
// which errs on the side of a message).
const isComment = (line: string) => /^\s*(\/\/|\/\*|\*)/.test(line)

const root = process.argv[2] ?? 'src'
const violations: string[] = []
for (const file of routeFiles(root).sort()) {
  readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
    if (isComment(line)) return
    for (const [pattern, what, instead] of RULES) {
      const m = pattern.exec(line)
      if (m) violations.push(`${relative(process.cwd(), file)}:${i + 1}: ${what === 'query building' ? m[1] : what} in a route file ${instead}`)
    }
  })
}
for (const v of violations) console.error(v)
if (violations.length > 0) {
  console.error(`check-routes: ${violations.length} violation(s); routes call operations and stores, they do not hold transactions or queries.`)
  process.exit(1)
}
console.log(`check-routes: ${routeFiles(root).length} route files, none holds a transaction, an event record or a query.`)
