// The SDK is generated from the description the service serves (`npm run sdk:generate`): when a
// route changes and the committed client does not, this fails and says how to regenerate.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { openapiDescription } from '../scripts/openapi-description.ts'
import { SDK_DESCRIPTION } from './sdk.helpers.ts'

const SDK = path.dirname(SDK_DESCRIPTION)
const HOW = 'the route table changed: run `npm run sdk:generate` and commit sdk/openapi.json and sdk/src/schema.ts'

it('the committed SDK was generated from the description the running routes serve', async () => {
  const live = await openapiDescription()
  const committed = JSON.parse(fs.readFileSync(SDK_DESCRIPTION, 'utf8'))
  assert.deepEqual(committed, live, HOW)

  // And its types are what the generator makes of that description today.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'warren-sdk-'))
  try {
    const out = path.join(dir, 'schema.ts')
    execFileSync(path.join(SDK, 'node_modules', '.bin', 'openapi-typescript'), [SDK_DESCRIPTION, '--output', out], { cwd: SDK, stdio: 'pipe' })
    assert.equal(fs.readFileSync(out, 'utf8'), fs.readFileSync(path.join(SDK, 'src', 'schema.ts'), 'utf8'), HOW)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
