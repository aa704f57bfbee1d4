import type { Deps } from '../deps.ts'
import { ApiError } from '../errors.ts'
import { ENV_KEY, PROFILE_LIMITS, type CreateProfileBody } from './environments.schema.ts'
import { getProfileByName, insertProfile, type ProfileRow } from './environments.store.ts'

/** Refusals name the key, never the value: values are secrets and must not reach logs or clients. */
function checkEnv(env: Record<string, string>): void {
  const keys = Object.keys(env)
  if (keys.length > PROFILE_LIMITS.keys) throw new ApiError('invalid_request', `env: at most ${PROFILE_LIMITS.keys} keys, got ${keys.length}.`)
  for (const key of keys) {
    if (!ENV_KEY.test(key)) throw new ApiError('invalid_request', `env key "${key}" is not a variable name: it must match ${ENV_KEY.source}.`)
    const bytes = Buffer.byteLength(env[key]!, 'utf8')
    if (bytes > PROFILE_LIMITS.valueBytes) {
      throw new ApiError('invalid_request', `env.${key}: the value is ${bytes} bytes; the limit is ${PROFILE_LIMITS.valueBytes} bytes (32 KiB).`)
    }
  }
}

export async function createProfile(deps: Pick<Deps, 'store' | 'box'>, orgId: string, body: CreateProfileBody): Promise<ProfileRow> {
  // An id-shaped name would make "id or name" references ambiguous.
  if (body.name.startsWith('envp_')) throw new ApiError('invalid_request', 'name may not begin with "envp_": profile ids use that prefix.')
  checkEnv(body.env)
  const row = await insertProfile(deps.store.db, deps.box, orgId, body.name, body.env)
  if (row) return row
  // The insert lost to the unique name; a concurrent delete can leave nothing to name.
  const existing = await getProfileByName(deps.store.db, orgId, body.name)
  throw new ApiError('conflict', `An environment profile named "${body.name}" already exists${existing ? `: ${existing.id}` : ''}.`)
}
