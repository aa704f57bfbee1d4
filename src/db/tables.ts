import type { Generated } from 'kysely'

/**
 * Row types of every table. JSON columns hold text (portable across both dialects); booleans are
 * 0/1 integers; timestamps are Unix milliseconds.
 */
export type Tables = {
  orgs: { id: string; name: string; created_at: number }
  tokens: {
    id: string
    org_id: string
    name: string | null
    hash: string
    scopes: string
    created_at: number
    expires_at: number
    revoked_at: number | null
    /** The token that minted this one over HTTP; null for one the CLI minted. */
    parent_id: string | null
  }
  sessions: {
    id: string
    org_id: string
    status: string
    created_at: number
    updated_at: number
    title: string
    source: string | null
    created_by_token: string
    metadata: string
    agent: string
    model_credential_id: string | null
    environment: string
    preview: string
    /** The opening message, owed to the first turn. */
    input: string | null
    deleted_at: number | null
    /** The node holding the session's lease (see nodes); null: nobody does. */
    owner_node: string | null
    /** Rises each time the lease changes hands (see ownership.store.ts): what a turn's writes are fenced by. */
    owner_epoch: Generated<number>
  }
  seed_files: { owner_id: string; path: string; mode: number; size_bytes: number; content: Uint8Array }
  model_credentials: {
    id: string
    org_id: string
    provider: string
    base_url: string
    name: string
    models: string
    is_default: number
    key_hint: string
    key_fingerprint: string
    api_key_enc: string
    created_at: number
  }
  agents: {
    id: string
    org_id: string
    name: string
    model: string
    model_credential_id: string
    instructions: string
    tools: string
    text: string
    created_at: number
    updated_at: number
  }
  webhook_subscriptions: {
    id: string
    org_id: string
    url: string
    events: string
    events_key: string
    secret_enc: string
    active: number
    created_at: number
  }
  webhook_deliveries: {
    id: string
    subscription_id: string
    event_seq: number
    status: string
    attempts: number
    next_attempt_at: number | null
    last_error: string | null
    last_failed_at: number | null
    created_at: number
  }
  environment_profiles: {
    id: string
    org_id: string
    name: string
    keys: string
    env_enc: string
    created_at: number
  }
  environment_templates: {
    id: string
    org_id: string
    name: string
    files: string
    repo: string | null
    setup: string | null
    profiles: string
    created_at: number
    updated_at: number
    /** An OCI image reference as written; null: none. */
    image: string | null
  }
  events: {
    seq: Generated<number>
    org_id: string
    session_id: string | null
    turn_id: string | null
    type: string
    created_at: number
    payload: string
  }
  rate_buckets: { token_id: string; bucket: string; tokens: number; updated_at: number }
  idempotency_keys: {
    token_id: string
    key: string
    fingerprint: string
    state: string
    status_code: number | null
    body: string | null
    created_at: number
    /** The node whose request claimed the key ('' for claims older than the column). */
    node_id: Generated<string>
  }
  usage_intervals: {
    id: string
    org_id: string
    session_id: string
    started_at: number
    ended_at: number | null
    reconciled: number
    billable: number
    needs_review: number
  }
  turns: {
    id: string
    session_id: string
    org_id: string
    /** Order of the turn within its session (1, 2, …): the queue order. */
    ordinal: number
    status: string
    text: string
    created_at: number
    started_at: number | null
    completed_at: number | null
    error: string | null
    artifacts: string | null
    artifacts_skipped: string
    cancel_requested: number
    steps: number
    /** The tool call being run right now; one left here by a crash is reported to the model as interrupted. */
    running_call: string | null
    /** Where the input stood in the queue when it arrived; null when it started at once. */
    queued_position: number | null
  }
  /** The messages the model sees, in order; compacted rows are kept for the record but no longer sent. */
  conversation: {
    session_id: string
    ordinal: number
    turn_id: string
    role: string
    message: string
    /** Estimated tokens of the message, for deciding when to compact. */
    tokens: number
    compacted: number
    created_at: number
  }
  /** What a turn waits on: approvals and questions (a person) and caller functions (required actions). */
  pending_calls: {
    session_id: string
    call_id: string
    turn_id: string
    org_id: string
    kind: string
    name: string
    arguments: string
    created_at: number
    expires_at: number | null
    status: string
    answer: string | null
    resolved_at: number | null
  }
  steers: { id: string; session_id: string; turn_id: string; text: string; created_at: number; delivered: number }
  model_steps: {
    turn_id: string
    step: number
    session_id: string
    org_id: string
    model: string
    model_credential_id: string
    input_tokens: number
    output_tokens: number
    created_at: number
  }
  stream_slots: {
    id: string
    token_id: string
    org_id: string
    expires_at: number
  }
  artifacts: {
    id: string
    org_id: string
    session_id: string
    turn_id: string
    path: string
    size_bytes: number
    sha256: string
    content_type: string
    blob_key: string
    created_at: number
  }
  nodes: {
    id: string
    host: string
    pid: number
    url: string
    data_dir: string
    sandbox_prefix: string
    sandbox_subnet: string
    uid_base: number
    uid_count: number
    started_at: number
    heartbeat_at: number
    stopped_at: number | null
    /** Shown by a peer that passes a request on to this node (see http/forward-to-owner.ts). */
    secret: string | null
  }
  previews: {
    subdomain: string
    session_id: string
    org_id: string
    port: number
    created_at: number
  }
  /** A withdrawn preview name, its organization's alone until held_until (Unix ms). */
  preview_name_holds: { subdomain: string; org_id: string; held_until: number }
  /** A complete blob of the database blob store: present only once every chunk of its upload is written. */
  blobs: { space: string; key: string; upload: string; size: number; chunks: number; created_at: number }
  blob_chunks: { upload: string; seq: number; data: Uint8Array }
  workspace_snapshots: { session_id: string; blob_key: string; taken_at: number; bytes: number }
}
