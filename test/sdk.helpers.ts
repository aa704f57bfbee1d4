// The SDK (sdk/) against the real service listening on a loopback port: a fetch that notes which
// operation of the description each request reached, so a test can tell that every one was called.
import fs from 'node:fs'
import path from 'node:path'

type Description = { paths: Record<string, Record<string, unknown>> }
const METHODS = ['get', 'post', 'put', 'patch', 'delete']

export const SDK_DESCRIPTION = path.join(import.meta.dirname, '..', 'sdk', 'openapi.json')

/** Every operation of the SDK's description, as "METHOD /template". */
export function operations(): string[] {
  const doc = JSON.parse(fs.readFileSync(SDK_DESCRIPTION, 'utf8')) as Description
  return Object.entries(doc.paths).flatMap(([p, ops]) => Object.keys(ops).filter((m) => METHODS.includes(m)).map((m) => `${m.toUpperCase()} ${p}`))
}

/** A fetch that records, for each request, the operation template its path matches. */
export function recordingFetch(base: typeof fetch = globalThis.fetch): { fetch: typeof fetch; called: Set<string> } {
  const templates = operations().map((op) => {
    const [method, template] = op.split(' ') as [string, string]
    const pattern = template.replace(/[.]/g, '\\.').replace(/\{\*\}/g, '.+').replace(/\{[^}]+\}/g, '[^/]+')
    // A literal segment wins over a parameter: fewer parameters, more specific.
    return { op, method, re: new RegExp(`^${pattern}/?$`), params: (template.match(/\{/g) ?? []).length }
  })
  const called = new Set<string>()
  const fetch: typeof globalThis.fetch = async (input, init) => {
    const req = new Request(input, init)
    const url = new URL(req.url)
    const match = templates.filter((t) => t.method === req.method && t.re.test(url.pathname)).sort((a, b) => a.params - b.params)[0]
    if (match) called.add(match.op)
    return base(req)
  }
  return { fetch, called }
}
