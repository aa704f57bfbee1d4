import { hash, randomBytes } from 'node:crypto'
import type { Db } from '../db/database.ts'
import { prepared } from '../db/prepared.ts'
import { newId } from '../shared/ids.ts'
import { fromJson, toJson } from '../shared/json.ts'
import { TOKEN_PREFIX, type Scope } from './scopes.ts'

export type TokenRecord = {
  id: string
  orgId: string
  name: string | null
  scopes: Scope[]
  createdAt: number
  expiresAt: number
  revokedAt: number | null
  /** The token that minted this one; null for one the CLI minted. */
  parentId: string | null
}

/** Tokens are high-entropy, so one SHA-256 is enough to make the stored form useless to a thief. */
export const hashToken = (secret: string): string => hash('sha256', secret, 'hex')

type TokenRow = { id: string; org_id: string; name: string | null; scopes: string; created_at: number; expires_at: number; revoked_at: number | null; parent_id: string | null }
const toToken = (r: TokenRow): TokenRecord => ({
  id: r.id,
  orgId: r.org_id,
  name: r.name,
  scopes: fromJson(r.scopes, []),
  createdAt: Number(r.created_at),
  expiresAt: Number(r.expires_at),
  revokedAt: r.revoked_at === null ? null : Number(r.revoked_at),
  parentId: r.parent_id,
})

export async function findOrgByName(db: Db, name: string): Promise<{ id: string; name: string } | null> {
  return (await db.selectFrom('orgs').select(['id', 'name']).where('name', '=', name).executeTakeFirst()) ?? null
}

/** Returns the organization with this name, creating it when missing (safe against a concurrent creator). */
export async function ensureOrg(db: Db, name: string): Promise<{ id: string; name: string }> {
  const found = await findOrgByName(db, name)
  if (found) return found
  await db
    .insertInto('orgs')
    .values({ id: newId('org'), name, created_at: Date.now() })
    .onConflict((oc) => oc.column('name').doNothing())
    .execute()
  return (await findOrgByName(db, name))!
}

export type MintInput = { orgId: string; name: string | null; scopes: Scope[]; days: number; parentId?: string | null }

/** Creates a token; the secret is returned here once and only its hash is kept. */
export async function insertToken(db: Db, input: MintInput): Promise<{ record: TokenRecord; secret: string }> {
  const secret = TOKEN_PREFIX + randomBytes(30).toString('base64url')
  const now = Date.now()
  const row = {
    id: newId('tok'),
    org_id: input.orgId,
    name: input.name,
    hash: hashToken(secret),
    scopes: toJson(input.scopes),
    created_at: now,
    expires_at: now + input.days * 86_400_000,
    revoked_at: null,
    parent_id: input.parentId ?? null,
  }
  await db.insertInto('tokens').values(row).execute()
  return { record: toToken(row), secret }
}

const tokenByHash = prepared((db, hash: string) => db.selectFrom('tokens').selectAll().where('hash', '=', hash))

/** Runs on every authenticated request, hence prepared once. */
export async function findTokenByHash(db: Db, hash: string): Promise<TokenRecord | null> {
  const row = (await tokenByHash(db, hash))[0]
  return row ? toToken(row) : null
}

export async function getToken(db: Db, orgId: string, id: string): Promise<TokenRecord | null> {
  const row = await db.selectFrom('tokens').selectAll().where('id', '=', id).where('org_id', '=', orgId).executeTakeFirst()
  return row ? toToken(row) : null
}

export async function getTokenById(db: Db, id: string): Promise<TokenRecord | null> {
  const row = await db.selectFrom('tokens').selectAll().where('id', '=', id).executeTakeFirst()
  return row ? toToken(row) : null
}

/**
 * Revokes the token and every token minted under it, a generation a statement: those under it
 * first, then the token, then those under it again. Each generation is read after the one above it
 * was revoked and committed, so a child minted meanwhile is either seen by the second walk or finds
 * its parent revoked when its mint checks again (mint-token.ts): none is left standing. Cut short
 * (the process dies, the store goes away), a revocation leaves the token itself live while the
 * first walk runs, so that asking again finishes it; and a walk goes through tokens revoked before
 * as well, so that revoking a token again (warren tokens revoke) finishes one cut in its second
 * walk. Not to be run inside a transaction, which would hold back those commits.
 */
export async function revokeToken(db: Db, id: string): Promise<void> {
  const now = Date.now()
  await revokeMintedUnder(db, id, now)
  await db.updateTable('tokens').set({ revoked_at: now }).where('id', '=', id).where('revoked_at', 'is', null).execute()
  await revokeMintedUnder(db, id, now)
}

/** Ids named in one statement at the most: a generation may be larger than SQLite (32,766) or PostgreSQL (65,535) takes. */
const IDS_A_STATEMENT = 1000

/** Revokes every token minted under `id`, however deep, a generation at a time. */
async function revokeMintedUnder(db: Db, id: string, now: number): Promise<void> {
  for (let parents = [id]; parents.length > 0; ) {
    const children: string[] = []
    for (let i = 0; i < parents.length; i += IDS_A_STATEMENT) {
      const rows = await db.selectFrom('tokens').select('id').where('parent_id', 'in', parents.slice(i, i + IDS_A_STATEMENT)).execute()
      for (const r of rows) children.push(r.id)
    }
    for (let i = 0; i < children.length; i += IDS_A_STATEMENT) {
      await db.updateTable('tokens').set({ revoked_at: now }).where('id', 'in', children.slice(i, i + IDS_A_STATEMENT)).where('revoked_at', 'is', null).execute()
    }
    parents = children
  }
}

export function listTokenRows(db: Db, orgId: string) {
  return db.selectFrom('tokens').selectAll().where('org_id', '=', orgId).where('revoked_at', 'is', null)
}
export { toToken }
