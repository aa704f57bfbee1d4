// The import-direction check CI runs (scripts/check-imports.ts): clean on this tree, and each rule
// refuses the import it is about, naming the file, the import and the rule.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { runScript } from './run-script.ts'

const check = (src?: string) => runScript('check-imports.ts', src)

it('passes on this tree (its exceptions listed in the script)', async () => {
  const run = await check()
  assert.equal(run.code, 0, run.stderr)
  assert.match(run.stdout, /^check-imports: ok/)
})

it('refuses an import against each rule, and lets the allowed directions through', async () => {
  const src = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-imports-'))
  const files: Record<string, string> = {
    'app.ts': "import { sessionRoutes } from './sessions/sessions.routes.ts'\n",
    'sessions/sessions.routes.ts': "import { createSession } from './create-session.ts'\nimport type { Session } from './sessions.schema.ts'\n",
    'sessions/create-session.ts': "import { insertSession } from './sessions.store.ts'\nimport { withEvents } from '../events/record-event.ts'\n",
    'sessions/sessions.schema.ts': '',
    // Against the rules:
    'sessions/sessions.store.ts': "import { db } from '../db/database.ts'\nimport { createSession } from './create-session.ts'\n",
    'db/database.ts': "import type { Session } from '../sessions/sessions.schema.ts'\n",
    'sandbox/sandbox.ts': "import {\n  insertSession,\n} from '../sessions/sessions.store.ts'\n",
    'turns/send-message.ts': "import { createSession } from '../sessions/create-session.ts'\nimport { getSession } from '../sessions/sessions.store.ts'\n",
    // The local provider is reached through the registry's entry alone; its own files import each other freely.
    'sandbox/providers.ts': "import { localKind } from './local/local-kind.ts'\n",
    'sandbox/local/local-kind.ts': "import { createLocalProvider } from './create-local.ts'\n",
    'sandbox/local/create-local.ts': '',
    'nodes/join-node.ts': "import type { HostClaim } from '../sandbox/sandbox.ts'\nimport { cgroupPrefix } from '../sandbox/local/create-local.ts'\n",
    'events/record-event.ts': "// import { sessionRoutes } from '../sessions/sessions.routes.ts'\nconst m = await import('../sessions/sessions.routes.ts')\n",
  }
  try {
    for (const [f, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(src, f)), { recursive: true })
      fs.writeFileSync(path.join(src, f), text)
    }
    const run = await check(src)
    assert.equal(run.code, 1)
    const lines = run.stderr.split('\n').slice(1).map((l) => l.trim()).filter(Boolean)
    assert.deepEqual(lines.map((l) => l.split(': ').slice(0, 2).join(': ')).sort(), [
      'db/database.ts -> sessions/sessions.schema.ts: db-is-the-bottom',
      'events/record-event.ts -> sessions/sessions.routes.ts: domains-meet-at-schemas-and-stores',
      'events/record-event.ts -> sessions/sessions.routes.ts: routes-are-the-top',
      'nodes/join-node.ts -> sandbox/local/create-local.ts: local-provider-is-private',
      'sandbox/sandbox.ts -> sessions/sessions.store.ts: seams-import-no-domain',
      'sessions/sessions.store.ts -> sessions/create-session.ts: stores-import-down',
      'turns/send-message.ts -> sessions/create-session.ts: domains-meet-at-schemas-and-stores',
    ])
  } finally {
    fs.rmSync(src, { recursive: true, force: true })
  }
})
