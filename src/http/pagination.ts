import { sql, type SelectQueryBuilder } from 'kysely'
import { Type, type TSchema } from 'typebox'

const limit = Type.Integer({ minimum: 1, maximum: 100, default: 20, description: '1 to 100; out of range is a 400, not a clamp.' })
const after = Type.String({ description: "The previous page's last_id. A cursor that cannot be placed gives an empty page." })
const order = Type.Union([Type.Literal('asc'), Type.Literal('desc')], { default: 'desc', description: 'Newest first by default.' })

/** Query parameters of a collection that has `order`. */
export const OrderedListQuery = { limit: Type.Optional(limit), order: Type.Optional(order), after: Type.Optional(after) }
/** Query parameters of a collection without `order` (agents, webhooks, model connections, profiles). */
export const PlainListQuery = { limit: Type.Optional(limit), after: Type.Optional(after) }

export type ListParams = { limit?: number; order?: 'asc' | 'desc'; after?: string }

export const ListEnvelope = <T extends TSchema>(item: T) => {
  const name = (item as { $id?: unknown }).$id
  return Type.Object(
    {
      object: Type.Literal('list'),
      data: Type.Array(item),
      has_more: Type.Boolean({ description: 'Decided by looking one row past the page.' }),
      last_id: Type.String({ description: 'Id of the last object on this page; empty when the page is empty.' }),
    },
    // Named after its item: SessionList, TurnList …
    { additionalProperties: false, ...(typeof name === 'string' ? { $id: `${name}List` } : {}) },
  )
}

export type List<T> = { object: 'list'; data: T[]; has_more: boolean; last_id: string }

/** Builds the envelope from a page fetched one row long. */
export function toList<T extends { id: string }>(rows: T[], pageSize: number): List<T> {
  const data = rows.slice(0, pageSize)
  return { object: 'list', data, has_more: rows.length > pageSize, last_id: data.at(-1)?.id ?? '' }
}

export const emptyList = <T>(): List<T> => ({ object: 'list', data: [], has_more: false, last_id: '' })

type Cursor = { created_at: number; id: string }

/**
 * Orders a query by (created_at, id), places the `after` cursor, and fetches one row past the
 * page. `cursor` is the cursor row looked up within the caller's organization; pass null when it
 * cannot be placed, and the caller returns an empty page.
 */
export function pageQuery<QB extends SelectQueryBuilder<any, any, any>>(
  query: QB,
  params: ListParams,
  cursor: Cursor | undefined,
  tableAlias?: string,
): QB {
  const direction = params.order ?? 'desc'
  const col = (c: string) => sql.ref(tableAlias ? `${tableAlias}.${c}` : c)
  let q = query
  if (cursor) {
    const op = direction === 'desc' ? sql.raw('<') : sql.raw('>')
    q = q.where(sql<boolean>`(${col('created_at')}, ${col('id')}) ${op} (${cursor.created_at}, ${cursor.id})`) as QB
  }
  return q
    .orderBy(col('created_at') as never, direction)
    .orderBy(col('id') as never, direction)
    .limit((params.limit ?? 20) + 1) as QB
}

/**
 * One page of a collection: the `after` cursor is placed within the collection itself, so an id
 * it does not hold (deleted, revoked, never issued, another organization's) gives an empty page.
 * `shape` sees only the page's rows, not the one fetched past it.
 */
export async function listPage<R extends { id: string; created_at: number }, T extends { id: string }>(
  collection: SelectQueryBuilder<any, any, R>,
  params: ListParams,
  shape: (rows: R[]) => T[] | Promise<T[]>,
): Promise<List<T>> {
  let cursor: Cursor | undefined
  if (params.after !== undefined) {
    const row = await collection.where('id' as never, '=', params.after as never).executeTakeFirst()
    if (!row) return emptyList()
    cursor = { created_at: Number(row.created_at), id: row.id }
  }
  const rows = await pageQuery(collection, params, cursor).execute()
  const limit = params.limit ?? 20
  const data = await shape(rows.slice(0, limit))
  return { object: 'list', data, has_more: rows.length > limit, last_id: data.at(-1)?.id ?? '' }
}
