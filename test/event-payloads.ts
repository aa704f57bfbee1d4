import assert from 'node:assert/strict'
import type { TSchema } from 'typebox'
import { Value } from 'typebox/value'
import { EVENTS } from '../src/events/events.schema.ts'
import type { Warren } from './harness.ts'

/**
 * Checks every event in the store against the payload schema events.schema.ts gives its name, and
 * returns the names seen: the schemas are what the OpenAPI description and recording are typed
 * by, so they must describe what is written.
 */
export async function expectLogMatchesSchemas(w: Warren): Promise<Set<string>> {
  const rows = await w.store.db.selectFrom('events').select(['seq', 'type', 'payload']).orderBy('seq').execute()
  const seen = new Set<string>()
  const bad: string[] = []
  for (const r of rows) {
    seen.add(r.type)
    const spec = (EVENTS as Record<string, { payload: TSchema }>)[r.type]
    if (!spec) {
      bad.push(`seq ${r.seq}: ${r.type} has no schema`)
      continue
    }
    const payload = JSON.parse(r.payload)
    if (!Value.Check(spec.payload, payload)) bad.push(`seq ${r.seq} ${r.type} ${r.payload}: ${[...Value.Errors(spec.payload, payload)].map((e) => `${e.instancePath} ${e.message}`).join('; ')}`)
  }
  assert.deepEqual(bad, [], 'events whose payload does not match their schema')
  return seen
}
