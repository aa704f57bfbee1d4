import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * Which holding of a session's lease a node acts under: the epoch rises each time the session
 * changes hands, so that a node that lost it (paused past its lease, then woken with a model's
 * answer or a command's result in hand) is refused by every write of a turn, which checks the
 * epoch it started with in its transaction.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  await db.schema.alterTable('sessions').addColumn('owner_epoch', 'integer', (c) => c.notNull().defaultTo(0)).execute()
}
