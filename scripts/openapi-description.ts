// Prints the service's OpenAPI description, the one `GET /v1/openapi.json` serves, built from the
// same assembly on a throwaway SQLite folder (nothing started: no node joined, no sandbox touched).
// The SDK is generated from it (`sdk/openapi.json`), and CI compares the two (test/sdk.drift.test.ts).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { assemble } from '../src/assemble.ts'
import { loadConfig } from '../src/config.ts'

export async function openapiDescription(): Promise<unknown> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-openapi-'))
  try {
    const service = await assemble(loadConfig({ WARREN_DATA_DIR: dataDir, PORT: '0' }), { logger: false })
    try {
      await service.app.ready()
      return service.app.swagger()
    } finally {
      await service.close()
    }
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}

if (import.meta.main) {
  const out = process.argv[2]
  const text = JSON.stringify(await openapiDescription(), null, 2) + '\n'
  if (out) fs.writeFileSync(out, text)
  else process.stdout.write(text)
}
