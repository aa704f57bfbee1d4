import { isIP } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { MIB } from './http/limits.ts'
import { LOOPBACK_AND_PRIVATE } from './shared/address-policy.ts'
import { ImageReferenceError, parseImageReference } from './images/image-reference.ts'

/**
 * The Warren installation: the folder that holds src/. The default data folder lives here rather
 * than in the caller's working folder, so `warren serve` and `warren tokens create` started from
 * anywhere meet the same store.
 */
export const INSTALL_DIR = path.resolve(import.meta.dirname, '..')


/** Everything the service reads from its environment, typed, with the specification's defaults. */
export type Config = {
  host: string
  port: number
  dataDir: string
  /** postgres://… switches the store to PostgreSQL; undefined keeps SQLite under dataDir. */
  databaseUrl: string | undefined
  /** 32-byte key (base64 or hex) that encrypts secrets at rest; undefined: a key file under dataDir. */
  encryptionKey: string | undefined
  /** The key being rotated away from: still opens what it sealed until `warren keys reseal` has run. */
  encryptionKeyPrevious: string | undefined
  idlePauseMs: number
  workspaceLifetimeMs: number
  webhookRetryDelaysMs: number[]
  webhookTimeoutMs: number
  turnCompletedWaitMs: number
  ssePingMs: number
  approvalTimeoutMs: number
  /** Pauses before each retry of a failed model call; their count is the number of retries. */
  providerRetryDelaysMs: number[]
  /** A model stream silent this long is abandoned and retried. */
  modelStallMs: number
  /** Context window assumed for every model; 0 uses the model family's own. */
  contextWindowTokens: number
  rateSessionsPerMin: number
  rateGeneralPerMin: number
  maxSessionsPerOrg: number
  replayLimit: number
  disabledTools: string[]
  /** CIDRs of loopback or private addresses webhook deliveries may go to (WARREN_ALLOW_PRIVATE_WEBHOOKS). */
  allowPrivateWebhooks: string[]
  /** CIDRs of loopback or private addresses remote MCP servers may be at (WARREN_ALLOW_PRIVATE_MCP). */
  allowPrivateMcp: string[]
  /** CIDRs of loopback or private addresses model servers (base_url) may be at (WARREN_MODEL_ALLOW_PRIVATE). */
  modelAllowPrivate: string[]
  /** CIDRs of loopback or private addresses image registries may be at (WARREN_IMAGE_ALLOW_PRIVATE). */
  imageAllowPrivate: string[]
  /** Registries (`host[:port]`, lower case) reached over plain HTTP although not on loopback (WARREN_IMAGE_PLAIN_HTTP). */
  imagePlainHttp: string[]
  /** Most MiB one image layer's download may be. */
  imageMaxLayerMb: number
  /** Hours an image layer (or config) no sandbox or pull has used stays in the node's cache (WARREN_IMAGE_KEEP_HOURS); 0: for ever. */
  imageKeepHours: number
  /** The image a session runs on when neither it nor its template names one (WARREN_DEFAULT_IMAGE); undefined: the host's system. */
  defaultImage: string | undefined
  previewDomain: string
  /** How long a withdrawn preview name stays its organization's; 0: free at once. */
  previewNameHoldMs: number
  /** The SearXNG instance web_search and image_search ask; undefined: both are unavailable. */
  searchUrl: string | undefined
  /** Where callers reach this service (the token-gated preview address is built on it). */
  publicUrl: string
  gitBaseUrl: string
  logLevel: string
  /** Per-workspace ceilings: memory (MiB), processes, and CPU as a fraction of one core. */
  sandboxMemoryMb: number
  sandboxPids: number
  sandboxCpus: number
  /** Ceilings on published artifacts: one turn's, and everything an organization keeps (bytes). */
  artifactTurnBytes: number
  artifactOrgBytes: number
  /** Domain globs every workspace may reach through the egress proxy (plus its own allow rules). */
  sandboxAllowedDomains: string[]
  /** The kind of sandbox provider workspaces run on (WARREN_SANDBOX_PROVIDER), a name of the registry in src/sandbox/providers.ts. */
  sandboxProvider: string
  /**
   * The WARREN_* variables as read, for the provider kind's own settings, which it reads and checks
   * itself at start (the local provider's: src/sandbox/local/local-settings.ts): the shared
   * configuration holds only what every kind needs.
   */
  providerEnv: Readonly<Env>
  /** Most sandboxes this process brings up at once; the rest wait their turn (a burst of creates). */
  sandboxStarts: number
  /** How long a node's heartbeat may lapse before other nodes declare it dead and take its sessions. */
  nodeLeaseMs: number
  /** Where other nodes reach this one (forwarded requests, previews); undefined: its listen address. */
  nodeUrl: string | undefined
  /**
   * Where GET /metrics is served on a listener of its own (default 9464, on loopback: the main
   * listener is often public, and the metrics say what the service does); undefined: on the main
   * listener, which WARREN_METRICS_PORT=main asks for.
   */
  metricsPort: number | undefined
  metricsHost: string
}

export type Env = Record<string, string | undefined>

/** Prometheus exporters' customary port: the metrics' own listener unless told otherwise. */
export const DEFAULT_METRICS_PORT = 9464

/** WARREN_METRICS_PORT: a port (0: any free one), "main" (undefined: the main listener), or unset (the default port). */
function metricsPort(raw: string | undefined, problems: string[]): number | undefined {
  if (raw === undefined || raw === '') return DEFAULT_METRICS_PORT
  if (raw === 'main') return undefined
  const n = Number(raw)
  if (/^\d+$/.test(raw) && n <= 65535) return n
  problems.push(`WARREN_METRICS_PORT must be a port number (0 to 65535) or "main", got "${raw}"`)
  return DEFAULT_METRICS_PORT
}

/**
 * Readers of environment variables, each returning its default and adding a line to `problems`
 * when a value is bad: the shared configuration's, and each provider kind's own settings
 * (src/sandbox/<kind>/), so every setting is refused in the same words.
 */
export function envReaders(env: Env, problems: string[]) {
  const int = (name: string, def: number, min = 0): number => {
    const raw = env[name]
    if (raw === undefined || raw === '') return def
    const n = Number(raw)
    if (!Number.isInteger(n) || n < min) {
      problems.push(`${name} must be an integer of at least ${min}, got "${raw}"`)
      return def
    }
    return n
  }
  const bool = (name: string): boolean => {
    const raw = (env[name] ?? '').toLowerCase()
    if (raw === '' || raw === '0' || raw === 'false' || raw === 'off' || raw === 'no') return false
    if (raw === '1' || raw === 'true' || raw === 'on' || raw === 'yes') return true
    problems.push(`${name} must be a boolean (1/0, true/false, on/off), got "${env[name]}"`)
    return false
  }
  const number = (name: string, def: number): number => {
    const raw = env[name]
    if (raw === undefined || raw === '') return def
    const n = Number(raw)
    if (!Number.isFinite(n) || n <= 0) {
      problems.push(`${name} must be a positive number, got "${raw}"`)
      return def
    }
    return n
  }
  const list = (name: string): string[] =>
    (env[name] ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)

  /**
   * An outbound path's "allow private" setting: a comma list of CIDRs. The switch these settings
   * were before (1/true/on) still reads, as loopback and the private ranges; 0/false/off as none.
   */
  const cidrs = (name: string): string[] => {
    const raw = (env[name] ?? '').trim().toLowerCase()
    if (raw === '' || raw === '0' || raw === 'false' || raw === 'off' || raw === 'no') return []
    if (raw === '1' || raw === 'true' || raw === 'on' || raw === 'yes') return [...LOOPBACK_AND_PRIVATE]
    const listed = list(name)
    for (const cidr of listed) if (!validCidr(cidr)) problems.push(`${name} must be a comma list of CIDRs (127.0.0.1/32,10.0.5.0/24), got "${cidr}"`)
    return listed
  }
  return { int, bool, number, list, cidrs }
}

/** Reads the environment; throws one error that lists every bad variable. */
export function loadConfig(env: Env, overrides: Partial<Config> = {}): Config {
  const problems: string[] = []
  const { int, number, list, cidrs } = envReaders(env, problems)
  const port = int('PORT', 8080, 0)
  const delays = list('WARREN_WEBHOOK_RETRY_DELAYS_MS')
  let webhookRetryDelaysMs = [0, 60_000, 300_000, 1_800_000, 7_200_000, 21_600_000]
  if (delays.length > 0) {
    const parsed = delays.map(Number)
    if (parsed.length !== 6 || parsed.some((n) => !Number.isInteger(n) || n < 0)) {
      problems.push('WARREN_WEBHOOK_RETRY_DELAYS_MS must be six comma-separated non-negative integers')
    } else webhookRetryDelaysMs = parsed
  }
  let providerRetryDelaysMs = [1_000, 5_000, 15_000]
  const rawDelays = env.WARREN_PROVIDER_RETRY_DELAYS_MS
  if (rawDelays === 'none') providerRetryDelaysMs = []
  else if (rawDelays) {
    const parsed = list('WARREN_PROVIDER_RETRY_DELAYS_MS').map(Number)
    if (parsed.some((n) => !Number.isInteger(n) || n < 0)) problems.push('WARREN_PROVIDER_RETRY_DELAYS_MS must be comma-separated non-negative integers, or "none"')
    else providerRetryDelaysMs = parsed
  }
  const databaseUrl = env.DATABASE_URL || undefined
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    problems.push('DATABASE_URL must start with postgres:// or postgresql://')
  }

  const config: Config = {
    host: env.HOST || '127.0.0.1',
    port,
    // A path the user typed is relative to where they typed it; only the default is the installation's.
    dataDir: env.WARREN_DATA_DIR ? path.resolve(env.WARREN_DATA_DIR) : path.join(INSTALL_DIR, '.warren'),
    databaseUrl,
    encryptionKey: env.WARREN_ENCRYPTION_KEY || undefined,
    encryptionKeyPrevious: env.WARREN_ENCRYPTION_KEY_PREVIOUS || undefined,
    idlePauseMs: int('WARREN_IDLE_PAUSE_MS', 300_000, 1),
    workspaceLifetimeMs: int('WARREN_WORKSPACE_LIFETIME_MS', 7_200_000, 1),
    webhookRetryDelaysMs,
    webhookTimeoutMs: int('WARREN_WEBHOOK_TIMEOUT_MS', 10_000, 1),
    turnCompletedWaitMs: int('WARREN_TURN_COMPLETED_WAIT_MS', 30_000, 0),
    ssePingMs: int('WARREN_SSE_PING_MS', 15_000, 1),
    approvalTimeoutMs: int('WARREN_APPROVAL_TIMEOUT_MS', 600_000, 1),
    providerRetryDelaysMs,
    modelStallMs: int('WARREN_MODEL_STALL_MS', 120_000, 1),
    contextWindowTokens: int('WARREN_CONTEXT_WINDOW_TOKENS', 0, 0),
    rateSessionsPerMin: int('WARREN_RATE_SESSIONS_PER_MIN', 10, 1),
    rateGeneralPerMin: int('WARREN_RATE_GENERAL_PER_MIN', 120, 1),
    maxSessionsPerOrg: int('WARREN_MAX_SESSIONS_PER_ORG', 25, 1),
    replayLimit: int('WARREN_REPLAY_LIMIT', 50_000, 1),
    disabledTools: list('WARREN_DISABLED_TOOLS'),
    allowPrivateWebhooks: cidrs('WARREN_ALLOW_PRIVATE_WEBHOOKS'),
    allowPrivateMcp: cidrs('WARREN_ALLOW_PRIVATE_MCP'),
    modelAllowPrivate: cidrs('WARREN_MODEL_ALLOW_PRIVATE'),
    imageAllowPrivate: cidrs('WARREN_IMAGE_ALLOW_PRIVATE'),
    imagePlainHttp: list('WARREN_IMAGE_PLAIN_HTTP').map((r) => r.toLowerCase()),
    imageMaxLayerMb: int('WARREN_IMAGE_MAX_LAYER_MB', 4096, 1),
    imageKeepHours: int('WARREN_IMAGE_KEEP_HOURS', 168, 0),
    defaultImage: env.WARREN_DEFAULT_IMAGE || undefined,
    previewDomain: (env.WARREN_PREVIEW_DOMAIN || `preview.localhost:${port}`).toLowerCase(),
    previewNameHoldMs: int('WARREN_PREVIEW_NAME_HOLD_MS', 86_400_000, 0),
    publicUrl: (env.WARREN_PUBLIC_URL || `http://${reachableHost(env.HOST || '127.0.0.1')}:${port}`).replace(/\/+$/, ''),
    searchUrl: env.WARREN_SEARCH_URL ? env.WARREN_SEARCH_URL.replace(/\/+$/, '') : undefined,
    gitBaseUrl: (env.WARREN_GIT_BASE_URL || 'https://github.com').replace(/\/+$/, ''),
    logLevel: env.WARREN_LOG_LEVEL || 'info',
    sandboxMemoryMb: int('WARREN_SANDBOX_MEMORY_MB', 2048, 16),
    sandboxPids: int('WARREN_SANDBOX_PIDS', 512, 8),
    sandboxCpus: number('WARREN_SANDBOX_CPUS', 1),
    artifactTurnBytes: int('WARREN_ARTIFACT_TURN_MB', 500, 1) * MIB,
    artifactOrgBytes: int('WARREN_ARTIFACT_ORG_MB', 10_240, 1) * MIB,
    sandboxAllowedDomains:
      env.WARREN_SANDBOX_ALLOWED_DOMAINS === undefined
        ? ['registry.npmjs.org', 'pypi.org', 'files.pythonhosted.org', 'github.com', 'codeload.github.com', 'objects.githubusercontent.com']
        : list('WARREN_SANDBOX_ALLOWED_DOMAINS'),
    sandboxProvider: env.WARREN_SANDBOX_PROVIDER || 'local',
    providerEnv: Object.fromEntries(Object.entries(env).filter(([name]) => name.startsWith('WARREN_'))),
    // Bring-up forks and writes cgroup files on this process's event loop: about one per core.
    sandboxStarts: int('WARREN_SANDBOX_STARTS', os.availableParallelism(), 1),
    nodeLeaseMs: int('WARREN_NODE_LEASE_MS', 15_000, 1000),
    nodeUrl: env.WARREN_NODE_URL ? env.WARREN_NODE_URL.replace(/\/+$/, '') : undefined,
    metricsPort: metricsPort(env.WARREN_METRICS_PORT, problems),
    metricsHost: env.WARREN_METRICS_HOST || '127.0.0.1',
    ...overrides,
  }
  if (config.encryptionKey !== undefined && decodeKey(config.encryptionKey) === null) {
    problems.push('WARREN_ENCRYPTION_KEY must be 32 bytes, written as 64 hex digits or base64')
  }
  if (config.encryptionKeyPrevious !== undefined && decodeKey(config.encryptionKeyPrevious) === null) {
    problems.push('WARREN_ENCRYPTION_KEY_PREVIOUS must be 32 bytes, written as 64 hex digits or base64')
  }
  if (config.encryptionKeyPrevious !== undefined && config.encryptionKey === undefined) {
    problems.push('WARREN_ENCRYPTION_KEY_PREVIOUS needs WARREN_ENCRYPTION_KEY: the key being rotated to')
  }
  if (config.searchUrl !== undefined && !/^https?:\/\/[^/]/.test(config.searchUrl)) problems.push('WARREN_SEARCH_URL must be an http(s) address of a SearXNG instance')
  if (config.nodeUrl !== undefined && !/^https?:\/\/[^/]+$/.test(config.nodeUrl)) problems.push('WARREN_NODE_URL must be an http(s) origin other nodes reach this one at (http://10.0.0.5:8080), with no path')
  for (const r of config.imagePlainHttp) {
    if (!/^(\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9.-]*[a-z0-9])?)(:\d{1,5})?$/.test(r)) problems.push(`WARREN_IMAGE_PLAIN_HTTP must be a comma list of registries as references name them (host[:port]), got "${r}"`)
  }
  if (config.defaultImage !== undefined) {
    try {
      parseImageReference(config.defaultImage)
    } catch (err) {
      if (!(err instanceof ImageReferenceError)) throw err
      problems.push(`WARREN_DEFAULT_IMAGE must be an image reference (host[:port]/name:tag or …@sha256:digest): ${err.message}`)
    }
  }
  if (config.artifactTurnBytes > 500 * MIB) problems.push(`WARREN_ARTIFACT_TURN_MB may lower the specification's 500 MiB ceiling, not raise it, got "${env.WARREN_ARTIFACT_TURN_MB}"`)
  if (env.WARREN_METRICS_HOST && config.metricsPort === undefined) problems.push('WARREN_METRICS_HOST needs a metrics listener of their own: WARREN_METRICS_PORT=main serves /metrics on the main listener')
  if (problems.length > 0) throw new Error(`Invalid configuration:\n  - ${problems.join('\n  - ')}`)
  return config
}

/** An IPv4 or IPv6 `address/bits`. */
export function validCidr(cidr: string): boolean {
  const [net, len] = cidr.split('/')
  const family = isIP(net ?? '')
  const bits = Number(len)
  return family !== 0 && /^\d+$/.test(len ?? '') && bits >= 0 && bits <= (family === 4 ? 32 : 128)
}

/** The address a caller dials for a listening address: a wildcard means this machine. */
export function reachableHost(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1'
  if (host === '::') return '[::1]'
  return host.includes(':') ? `[${host}]` : host
}

/**
 * Fills in the port once the service listens, where the defaults were built from PORT=0 (an
 * ephemeral port, as in tests): the preview domain and the public address name the real one.
 */
export function settleListenPort(config: Config, port: number): void {
  config.previewDomain = config.previewDomain.replace(/:0$/, `:${port}`)
  config.publicUrl = config.publicUrl.replace(/:0$/, `:${port}`)
}

/** A 32-byte key from 64 hex digits or base64; null when it is neither. */
export function decodeKey(text: string): Buffer | null {
  if (/^[0-9a-fA-F]{64}$/.test(text)) return Buffer.from(text, 'hex')
  const b = Buffer.from(text, 'base64')
  return b.length === 32 ? b : null
}
