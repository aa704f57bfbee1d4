// The import-direction check (style.md §1): routes → operations → stores → db/; seams import no
// domain; a domain may import another domain's *.schema.ts or *.store.ts, never its routes.
// Reads every relative import under src/, prints one line per import that breaks a rule (with the
// rule's reason), and exits 1 when any does. TypeScript 7 (the installed compiler) ships no
// compiler API in JavaScript, so imports are read with a pattern: the code base writes only static
// `import … from '…'` / `export … from '…'` and `import('…')`, on relative paths ending in .ts.
// Usage: node_modules/.bin/node scripts/check-imports.ts [SRC] (another tree: its own tests; ALLOWED is this one's)
import fs from 'node:fs'
import path from 'node:path'

const OWN_SRC = path.resolve(import.meta.dirname, '..', 'src')
const SRC = process.argv[2] ? path.resolve(process.argv[2]) : OWN_SRC

/** Files every layer may import: the configuration, the error table, the dependency types, and shared helpers. */
const KERNEL = /^(config|errors|deps)\.ts$|^shared\//
/**
 * Seams: what Warren talks to without owning a domain (sandboxes, the blob store, the tools the
 * model runs, MCP servers, the event bus's wake-ups, the node's image cache the local provider pulls into,
 * checkpoints' contents, which a provider reads its workspaces into and writes them back from). Operations may use them; they import no domain.
 */
const SEAM = /^sandbox\/|^images\/|^checkpoints\/|^artifacts\/blob-store\.ts$|^tools\/(builtin|network|browser)\/|^tools\/result-parts\.ts$|^mcp\/|^events\/(pg-)?event-bus\.ts$/
/**
 * Files that stand with the schemas and stores, so any domain (and any store) may import them:
 * the one path that commits a change with its events, the lookup that turns a missing session
 * into 404, the session status moves every domain that drives a session makes, the closing of a
 * turn's open calls (a settle and a session's deletion both end turns), and vocabularies (event names, scopes, tool entries and the default set, seed files).
 */
const SHARED = new Set([
  'events/record-event.ts',
  'events/vocabulary.ts',
  'sessions/require-session.ts',
  'sessions/session-status.ts',
  'runner/close-open-calls.ts',
  'tokens/scopes.ts',
  'tools/tool-entries.ts',
  'tools/default-tools.ts',
  'files/decode-files.ts',
])
const isRoutes = (f: string) => f.endsWith('.routes.ts')
const isStore = (f: string) => f.endsWith('.store.ts')
const isSchema = (f: string) => f.endsWith('.schema.ts')
const folder = (f: string) => (f.includes('/') ? f.slice(0, f.indexOf('/')) : '')
const isDomainFile = (f: string) => f.includes('/') && !KERNEL.test(f) && !SEAM.test(f) && folder(f) !== 'db' && folder(f) !== 'http'
const meetingPoint = (f: string) => isSchema(f) || isStore(f) || SHARED.has(f)

type Rule = { name: string; why: string; breaks(from: string, to: string): boolean }

/** The rules, each with the reason a violation is printed with. */
const RULES: Rule[] = [
  {
    name: 'routes-are-the-top',
    why: "routes are registered by app.ts (or by their own domain's routes), never imported below",
    breaks: (from, to) => isRoutes(to) && from !== 'app.ts' && !(isRoutes(from) && folder(from) === folder(to)),
  },
  {
    name: 'stores-import-down',
    why: 'a store imports only db/, other stores, schemas and shared helpers, never an operation',
    breaks: (from, to) => isStore(from) && !(folder(to) === 'db' || meetingPoint(to) || KERNEL.test(to)),
  },
  { name: 'db-is-the-bottom', why: 'db/ knows no domain', breaks: (from, to) => folder(from) === 'db' && !(folder(to) === 'db' || KERNEL.test(to)) },
  { name: 'seams-import-no-domain', why: 'a seam (sandbox, blob store, tools, MCP, bus) imports no domain', breaks: (from, to) => SEAM.test(from) && !(SEAM.test(to) || KERNEL.test(to)) },
  {
    name: 'local-provider-is-private',
    why: "the local provider's files are its own: the service reaches it through the seam (sandbox/sandbox.ts) and the registry (sandbox/providers.ts imports its kind, sandbox/local/local-kind.ts)",
    breaks: (from, to) => to.startsWith('sandbox/local/') && !from.startsWith('sandbox/local/') && !(from === 'sandbox/providers.ts' && to === 'sandbox/local/local-kind.ts'),
  },
  {
    name: 'domains-meet-at-schemas-and-stores',
    why: "a domain may import another domain's schemas, stores and shared helpers, never its operations or routes",
    breaks: (from, to) => isDomainFile(from) && isDomainFile(to) && folder(from) !== folder(to) && !meetingPoint(to),
  },
]

/**
 * Imports that break a rule today and cannot be untangled in passing: "from -> to", each with why
 * it is let through. A new violation fails the check; one listed here that no longer occurs does too,
 * so the list only shrinks.
 */
const ALLOWED: Record<string, string> = {
  // The workspace manager owns a session's sandbox (wake, pause, recover, its rows and events): the
  // runner and the preview gateway reach sandboxes only through it. A seam it is not (it writes
  // the workspace domain's state); splitting its store writes out would make it one.
  'runner/agent-step.ts -> workspaces/workspace-manager.ts': 'the runner drives sandboxes through the workspace manager',
  'runner/run-calls.ts -> workspaces/workspace-manager.ts': 'the runner drives sandboxes through the workspace manager',
  'previews/preview-gateway.ts -> workspaces/workspace-manager.ts': 'a preview wakes the workspace it shows (type import)',
  // Uploaded files land in the workspace as a message is accepted: an operation of two domains.
  'turns/send-message.ts -> workspaces/upload-files.ts': 'a message with files writes them into the workspace',
  // The bus carries live events (agent.text, agent.thinking) typed by their payload schemas: a
  // type import, the event vocabulary rather than the domain's behaviour.
  'events/event-bus.ts -> events/events.schema.ts': 'live events on the bus are typed by their schemas',
  // The tool seams speak the tools domain's vocabulary (entry types, sealed entries): it is theirs
  // as much as the domain's. Moving tools.schema.ts and tool-entries.ts beside them would settle it.
  'tools/network/index.ts -> tools/tools.schema.ts': 'the network tools are named by the tool vocabulary',
  'tools/network/index.ts -> tools/tool-entries.ts': 'the network tools offered follow the stored entries',
  'mcp/mcp-hub.ts -> tools/tool-entries.ts': 'MCP servers are configured by tool entries',
  'mcp/mcp-tools.ts -> tools/tool-entries.ts': 'MCP servers are configured by tool entries',
  // Keyset pagination builds its query from the list parameters; it belongs in db/ or the store.
  'sessions/sessions.store.ts -> http/pagination.ts': 'the session list pages with the HTTP pagination helper',
}

function* sourceFiles(dir: string): Generator<string> {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name)
    if (e.isDirectory()) yield* sourceFiles(p)
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.test.ts')) yield p
  }
}

const violations: string[] = []
const seen = new Set<string>()
/** The relative module paths a file imports (type-only imports too: they bind the layers as much). */
function importsOf(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '')
  const found: string[] = []
  for (const m of code.matchAll(/^\s*(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)/gm)) {
    found.push((m[1] ?? m[2] ?? m[3])!)
  }
  return found.filter((f) => f.startsWith('.'))
}

for (const file of sourceFiles(SRC)) {
  const from = path.relative(SRC, file)
  for (const spec of importsOf(fs.readFileSync(file, 'utf8'))) {
    const to = path.relative(SRC, path.resolve(path.dirname(file), spec))
    if (to.startsWith('..')) continue
    for (const rule of RULES) {
      if (!rule.breaks(from, to)) continue
      const key = `${from} -> ${to}`
      seen.add(key)
      if (!(key in ALLOWED)) violations.push(`${key}: ${rule.name}: ${rule.why}`)
    }
  }
}
if (SRC === OWN_SRC) for (const key of Object.keys(ALLOWED)) if (!seen.has(key)) violations.push(`${key}: listed in ALLOWED but no longer imported; take it off the list`)

if (violations.length > 0) {
  process.stderr.write(`check-imports: ${violations.length} import(s) against the direction rules:\n  ${violations.join('\n  ')}\n`)
  process.exit(1)
}
process.stdout.write(`check-imports: ok (${seen.size} allowed exception(s))\n`)
