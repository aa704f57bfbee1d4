import type { Db } from '../db/database.ts'
import { ApiError } from '../errors.ts'
import type { Scope } from './scopes.ts'
import { getTokenById, insertToken, revokeToken, type TokenRecord } from './tokens.store.ts'

const DAY_MS = 86_400_000

export type MintChild = { name: string | null; scopes: Scope[]; days: number }

/**
 * Mints a token under the calling one, which bounds it: no scope the parent lacks, no lifetime past
 * the parent's (both refused, never narrowed: the caller chose them), and revoking the parent
 * revokes it (tokens.store.ts revokeToken). The parent is read again after the child is written:
 * a revocation that the parent's check before raced is then seen here, and the child revoked with
 * it, whichever of the two committed first.
 */
export async function mintToken(db: Db, parentId: string, input: MintChild): Promise<{ record: TokenRecord; secret: string }> {
  const parent = await getTokenById(db, parentId)
  if (!parent || parent.revokedAt !== null) throw revoked()
  const missing = input.scopes.filter((s) => !parent.scopes.includes(s))
  if (missing.length > 0) throw new ApiError('permission_denied', `A token cannot grant scopes it lacks: ${missing.join(', ')}.`)
  if (Date.now() + input.days * DAY_MS > parent.expiresAt) {
    const left = Math.max(0, Math.floor((parent.expiresAt - Date.now()) / DAY_MS))
    throw new ApiError(
      'invalid_request',
      `expires_in_days ${input.days} would outlive the calling token, which expires at ${new Date(parent.expiresAt).toISOString()} (${left} whole day(s) from now); a token lives no longer than the token that mints it.`,
    )
  }
  const minted = await insertToken(db, { orgId: parent.orgId, name: input.name, scopes: input.scopes, days: input.days, parentId: parent.id })
  const now = await getTokenById(db, parent.id)
  if (!now || now.revokedAt !== null) {
    await revokeToken(db, minted.record.id)
    throw revoked()
  }
  return minted
}

const revoked = () => new ApiError('authentication_error', 'This access token has been revoked.')
