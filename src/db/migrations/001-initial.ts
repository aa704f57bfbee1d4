import type { Kysely } from 'kysely'
import type { DialectName } from '../database.ts'

/** The first schema: every table the foundation needs, on both dialects. */
export async function up(db: Kysely<any>, dialect: DialectName): Promise<void> {
  const big = 'bigint'
  const blob = dialect === 'postgres' ? 'bytea' : 'blob'
  const real = dialect === 'postgres' ? 'double precision' : 'real'

  await db.schema
    .createTable('orgs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text', (c) => c.notNull().unique())
    .addColumn('created_at', big, (c) => c.notNull())
    .execute()

  await db.schema
    .createTable('tokens')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('name', 'text')
    .addColumn('hash', 'text', (c) => c.notNull().unique())
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addColumn('expires_at', big, (c) => c.notNull())
    .addColumn('revoked_at', big)
    .execute()
  await db.schema.createIndex('tokens_org').on('tokens').columns(['org_id', 'created_at']).execute()

  await db.schema
    .createTable('sessions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addColumn('updated_at', big, (c) => c.notNull())
    .addColumn('title', 'text', (c) => c.notNull())
    .addColumn('source', 'text')
    .addColumn('created_by_token', 'text', (c) => c.notNull())
    .addColumn('metadata', 'text', (c) => c.notNull())
    .addColumn('agent', 'text', (c) => c.notNull())
    .addColumn('model_credential_id', 'text')
    .addColumn('environment', 'text', (c) => c.notNull())
    .addColumn('preview', 'text', (c) => c.notNull())
    .addColumn('input', 'text')
    .addColumn('deleted_at', big)
    .execute()
  await db.schema.createIndex('sessions_org').on('sessions').columns(['org_id', 'created_at', 'id']).execute()
  await db.schema.createIndex('sessions_credential').on('sessions').column('model_credential_id').execute()

  await db.schema
    .createTable('seed_files')
    .addColumn('owner_id', 'text', (c) => c.notNull())
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('mode', 'integer', (c) => c.notNull())
    .addColumn('size_bytes', 'integer', (c) => c.notNull())
    .addColumn('content', blob, (c) => c.notNull())
    .addPrimaryKeyConstraint('seed_files_pk', ['owner_id', 'path'])
    .execute()

  await db.schema
    .createTable('model_credentials')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('provider', 'text', (c) => c.notNull())
    .addColumn('base_url', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('models', 'text', (c) => c.notNull())
    .addColumn('is_default', 'integer', (c) => c.notNull())
    .addColumn('key_hint', 'text', (c) => c.notNull())
    .addColumn('key_fingerprint', 'text', (c) => c.notNull())
    .addColumn('api_key_enc', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .execute()
  await db.schema.createIndex('model_credentials_org').on('model_credentials').columns(['org_id', 'created_at']).execute()

  await db.schema
    .createTable('agents')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('model', 'text', (c) => c.notNull())
    .addColumn('model_credential_id', 'text', (c) => c.notNull())
    .addColumn('instructions', 'text', (c) => c.notNull())
    .addColumn('tools', 'text', (c) => c.notNull())
    .addColumn('text', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addColumn('updated_at', big, (c) => c.notNull())
    .execute()
  await db.schema.createIndex('agents_org').on('agents').columns(['org_id', 'created_at']).execute()

  await db.schema
    .createTable('webhook_subscriptions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('url', 'text', (c) => c.notNull())
    .addColumn('events', 'text', (c) => c.notNull())
    .addColumn('events_key', 'text', (c) => c.notNull())
    .addColumn('secret_enc', 'text', (c) => c.notNull())
    .addColumn('active', 'integer', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .execute()
  await db.schema
    .createIndex('webhook_subscriptions_org')
    .on('webhook_subscriptions')
    .columns(['org_id', 'created_at'])
    .execute()

  await db.schema
    .createTable('webhook_deliveries')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('subscription_id', 'text', (c) => c.notNull())
    .addColumn('event_seq', big, (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('next_attempt_at', big)
    .addColumn('last_error', 'text')
    .addColumn('last_failed_at', big)
    .addColumn('created_at', big, (c) => c.notNull())
    .execute()
  await db.schema
    .createIndex('webhook_deliveries_sub')
    .on('webhook_deliveries')
    .columns(['subscription_id', 'status'])
    .execute()
  await db.schema
    .createIndex('webhook_deliveries_due')
    .on('webhook_deliveries')
    .columns(['status', 'next_attempt_at'])
    .execute()

  await db.schema
    .createTable('environment_profiles')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('keys', 'text', (c) => c.notNull())
    .addColumn('env_enc', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addUniqueConstraint('environment_profiles_name', ['org_id', 'name'])
    .execute()

  await db.schema
    .createTable('environment_templates')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('files', 'text', (c) => c.notNull())
    .addColumn('repo', 'text')
    .addColumn('setup', 'text')
    .addColumn('profiles', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addColumn('updated_at', big, (c) => c.notNull())
    .addUniqueConstraint('environment_templates_name', ['org_id', 'name'])
    .execute()

  await db.schema
    .createTable('events')
    .addColumn('seq', dialect === 'postgres' ? 'bigserial' : 'integer', (c) =>
      dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement(),
    )
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('session_id', 'text')
    .addColumn('turn_id', 'text')
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('created_at', big, (c) => c.notNull())
    .addColumn('payload', 'text', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('events_session').on('events').columns(['session_id', 'seq']).execute()
  await db.schema.createIndex('events_org').on('events').columns(['org_id', 'seq']).execute()

  await db.schema
    .createTable('rate_buckets')
    .addColumn('token_id', 'text', (c) => c.notNull())
    .addColumn('bucket', 'text', (c) => c.notNull())
    .addColumn('tokens', real, (c) => c.notNull())
    .addColumn('updated_at', big, (c) => c.notNull())
    .addPrimaryKeyConstraint('rate_buckets_pk', ['token_id', 'bucket'])
    .execute()

  await db.schema
    .createTable('idempotency_keys')
    .addColumn('token_id', 'text', (c) => c.notNull())
    .addColumn('key', 'text', (c) => c.notNull())
    .addColumn('fingerprint', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('status_code', 'integer')
    .addColumn('body', 'text')
    .addColumn('created_at', big, (c) => c.notNull())
    .addPrimaryKeyConstraint('idempotency_keys_pk', ['token_id', 'key'])
    .execute()
  await db.schema.createIndex('idempotency_keys_age').on('idempotency_keys').column('created_at').execute()

  await db.schema
    .createTable('usage_intervals')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('started_at', big, (c) => c.notNull())
    .addColumn('ended_at', big)
    .addColumn('reconciled', 'integer', (c) => c.notNull())
    .addColumn('billable', 'integer', (c) => c.notNull())
    .addColumn('needs_review', 'integer', (c) => c.notNull())
    .execute()
  await db.schema.createIndex('usage_intervals_session').on('usage_intervals').column('session_id').execute()
}
