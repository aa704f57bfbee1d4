// Rewrites sdk/schema.d.ts from the description the app serves, built in-process on a scratch
// SQLite store. test/sdk.test.ts fails while the committed file differs from what this writes.
import fs from 'node:fs'
import path from 'node:path'
import { startWarren } from '../test/harness.ts'
import { generateSchema } from '../sdk/generate.ts'

const w = await startWarren('sqlite')
try {
  const res = await w.inject({ method: 'GET', url: '/v1/openapi.json', token: null })
  if (res.statusCode !== 200) throw new Error(`GET /v1/openapi.json answered ${res.statusCode}`)
  const file = path.join(import.meta.dirname, '..', 'sdk', 'schema.d.ts')
  fs.writeFileSync(file, await generateSchema(res.json()))
  process.stdout.write(`generate-sdk: wrote ${path.relative(process.cwd(), file)}\n`)
} finally {
  await w.close()
}
