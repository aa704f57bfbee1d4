// The web console's built files (console/dist, written by `npm --prefix console run build`, which
// scripts/setup.sh runs): hashed assets, and index.html for every client route under /console.
import fs from 'node:fs/promises'
import path from 'node:path'
import { ApiError } from '../errors.ts'

/** Where the console's build lands (console/vite.config.ts). */
export const CONSOLE_DIST = path.join(import.meta.dirname, '..', '..', 'console', 'dist')

export type ConsoleFile = { status: 200 | 404; type: string; cacheControl: string; body: Buffer | string }

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.map': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.txt': 'text/plain; charset=utf-8',
}
/** Asset names carry their content's hash: one never changes, so it may be kept for good. */
const IMMUTABLE = 'public, max-age=31536000, immutable'
/** index.html names the current assets: always asked again, so a new build shows at once. */
const FRESH = 'no-cache'

/**
 * The file for `rest` (the path after /console/): an asset under assets/ (404 when there is none:
 * a stale page asking for an old hash gets an answer, not the index), another file of the build
 * when it exists, and otherwise index.html, whose script reads the client route from the address.
 * Without a build, a page that says how to make one.
 */
export async function readConsoleFile(rest: string, dist: string = CONSOLE_DIST): Promise<ConsoleFile> {
  const segments = rest.split('/').filter(Boolean)
  if (segments.some((s) => s === '..' || s === '.' || s.includes('\\'))) throw new ApiError('not_found', `No console file "${rest}".`)
  const file = path.join(dist, ...segments)
  if (segments[0] === 'assets') {
    const body = await readIfFile(file)
    if (!body) throw new ApiError('not_found', `No console file "${rest}": it may be from an older build; reload the console.`)
    return { status: 200, type: typeOf(file), cacheControl: IMMUTABLE, body }
  }
  if (segments.length === 1 && path.extname(file) !== '') {
    const body = await readIfFile(file)
    if (body) return { status: 200, type: typeOf(file), cacheControl: FRESH, body }
  }
  const index = await readIfFile(path.join(dist, 'index.html'))
  if (!index) return { status: 404, type: TYPES['.html']!, cacheControl: 'no-store', body: NOT_BUILT }
  return { status: 200, type: TYPES['.html']!, cacheControl: FRESH, body: index }
}

const typeOf = (file: string) => TYPES[path.extname(file).toLowerCase()] ?? 'application/octet-stream'

async function readIfFile(file: string): Promise<Buffer | null> {
  try {
    return await fs.readFile(file)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT' || code === 'EISDIR' || code === 'ENOTDIR') return null
    throw err
  }
}

// No inline style or script: the console's Content-Security-Policy covers this page too.
const NOT_BUILT = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>Warren console: not built</title></head>
<body><h1>The web console is not built</h1>
<p>This service serves the console from <code>console/dist</code>, which is missing. Build it from the repository's root with:</p>
<pre>bash scripts/setup.sh --deps-only</pre>
<p>or by hand: <code>npm ci --prefix console &amp;&amp; npm --prefix console run build</code>. Then reload this page; the API under <code>/v1</code> works without it.</p>
</body></html>
`
