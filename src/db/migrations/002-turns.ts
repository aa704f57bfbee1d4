import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/**
 * Turns and everything a turn needs to resume after a restart: the conversation the model sees
 * (one row per message, in order), the calls it waits on (approvals, questions, caller
 * functions), text steered into a running turn, and token usage per model step.
 */
export async function up(db: Kysely<any>, _dialect: DialectName): Promise<void> {
  const big = 'bigint'

  await db.schema
    .createTable('turns')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('ordinal', 'integer', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('text', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addColumn('started_at', big)
    .addColumn('completed_at', big)
    .addColumn('error', 'text')
    .addColumn('artifacts', 'text')
    .addColumn('artifacts_skipped', 'text', (c) => c.notNull())
    .addColumn('cancel_requested', 'integer', (c) => c.notNull())
    .addColumn('steps', 'integer', (c) => c.notNull())
    .addColumn('running_call', 'text')
    .addColumn('queued_position', 'integer')
    .addUniqueConstraint('turns_session_ordinal', ['session_id', 'ordinal'])
    .execute()
  await db.schema.createIndex('turns_session_status').on('turns').columns(['session_id', 'status']).execute()
  await db.schema.createIndex('turns_status').on('turns').columns(['status', 'started_at']).execute()

  await db.schema
    .createTable('conversation')
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('ordinal', 'integer', (c) => c.notNull())
    .addColumn('turn_id', 'text', (c) => c.notNull())
    .addColumn('role', 'text', (c) => c.notNull())
    .addColumn('message', 'text', (c) => c.notNull())
    .addColumn('tokens', 'integer', (c) => c.notNull())
    .addColumn('compacted', 'integer', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addPrimaryKeyConstraint('conversation_pk', ['session_id', 'ordinal'])
    .execute()

  await db.schema
    .createTable('pending_calls')
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('call_id', 'text', (c) => c.notNull())
    .addColumn('turn_id', 'text', (c) => c.notNull())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('arguments', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addColumn('expires_at', big)
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('answer', 'text')
    .addColumn('resolved_at', big)
    .addPrimaryKeyConstraint('pending_calls_pk', ['session_id', 'call_id'])
    .execute()
  await db.schema.createIndex('pending_calls_status').on('pending_calls').columns(['status', 'kind', 'expires_at']).execute()

  await db.schema
    .createTable('steers')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('turn_id', 'text', (c) => c.notNull())
    .addColumn('text', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addColumn('delivered', 'integer', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('steers_turn').on('steers').columns(['turn_id', 'delivered']).execute()

  await db.schema
    .createTable('model_steps')
    .addColumn('turn_id', 'text', (c) => c.notNull())
    .addColumn('step', 'integer', (c) => c.notNull())
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('model', 'text', (c) => c.notNull())
    .addColumn('model_credential_id', 'text', (c) => c.notNull())
    .addColumn('input_tokens', 'integer', (c) => c.notNull())
    .addColumn('output_tokens', 'integer', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addPrimaryKeyConstraint('model_steps_pk', ['turn_id', 'step'])
    .execute()
}
