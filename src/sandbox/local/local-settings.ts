import { envReaders, validCidr, type Env } from '../../config.ts'
import { ipv4NetworkProblem } from '../../shared/ipv4-cidr.ts'

/** The IPv4 pool workspace addresses come from unless WARREN_SANDBOX_SUBNET names another (a /30 each). */
export const DEFAULT_SANDBOX_SUBNET = '10.213.0.0/16'
/** Folders of one workspace watched at most unless WARREN_WORKSPACE_MAX_WATCHES says otherwise. */
export const DEFAULT_WORKSPACE_MAX_WATCHES = 10_000
/** First host uid of a node's sandboxes unless WARREN_SANDBOX_UID_BASE names another. */
export const DEFAULT_SANDBOX_UID_BASE = 200_000
/**
 * How many host uids a node's sandboxes may take from its base: its range is [base, base + this).
 * Fixed, so that nodes on one host need only set bases this far apart.
 */
export const SANDBOX_UID_COUNT = 10_000
/** The widest and narrowest sandbox subnets: /24 still gives 64 workspaces (a /30 each). */
const SUBNET_BITS = { min: 8, max: 24 }

/** The local provider's own settings: what only sandboxes on this host need. */
export type LocalSettings = {
  /** Names this deployment's sandbox host resources; one running service per prefix on a host (WARREN_SANDBOX_PREFIX). */
  prefix: string
  /** IPv4 CIDR this node's workspace addresses come from; nodes on one host each need their own (WARREN_SANDBOX_SUBNET). */
  subnet: string
  /** First host uid of this node's sandboxes, which take [uidBase, uidBase + SANDBOX_UID_COUNT) (WARREN_SANDBOX_UID_BASE). */
  uidBase: number
  /** CIDRs the workspaces' egress proxy lets through although private: a deployment's own hosts, tests' namespaces (WARREN_SANDBOX_ALLOW_PRIVATE). */
  allowPrivate: string[]
  /** Most folders of one workspace watched for changes (one inotify watch each); past it the workspace is walked (WARREN_WORKSPACE_MAX_WATCHES). */
  maxWatches: number
  /** Each workspace's disk quota in MiB (a file system of its own); 0: plain folders on the data folder's disk (WARREN_WORKSPACE_DISK_MB). */
  diskMb: number
  /**
   * How many workspaces on an image may run as root inside at once, each on a range of 65536 host
   * uids of its own after the node's SANDBOX_UID_COUNT (WARREN_SANDBOX_ROOT_RANGES); 0: they run as
   * their unprivileged uid.
   */
  rootRanges: number
}

/** Reads the local provider's settings from the environment; throws one error that lists every bad variable. */
export function localSettings(env: Env): LocalSettings {
  const problems: string[] = []
  const { int, list } = envReaders(env, problems)
  const settings: LocalSettings = {
    prefix: env.WARREN_SANDBOX_PREFIX || 'wr',
    subnet: env.WARREN_SANDBOX_SUBNET || DEFAULT_SANDBOX_SUBNET,
    uidBase: int('WARREN_SANDBOX_UID_BASE', DEFAULT_SANDBOX_UID_BASE, 1000),
    allowPrivate: list('WARREN_SANDBOX_ALLOW_PRIVATE'),
    maxWatches: int('WARREN_WORKSPACE_MAX_WATCHES', DEFAULT_WORKSPACE_MAX_WATCHES, 0),
    diskMb: int('WARREN_WORKSPACE_DISK_MB', 10_240, 0),
    rootRanges: int('WARREN_SANDBOX_ROOT_RANGES', 0, 0),
  }
  for (const cidr of settings.allowPrivate) if (!validCidr(cidr)) problems.push(`WARREN_SANDBOX_ALLOW_PRIVATE must be a comma list of CIDRs (10.1.0.0/16), got "${cidr}"`)
  if (!/^[a-z][a-z0-9]{0,5}$/.test(settings.prefix)) problems.push('WARREN_SANDBOX_PREFIX must be 1 to 6 lowercase letters and digits, starting with a letter')
  const subnetProblem = ipv4NetworkProblem(settings.subnet, SUBNET_BITS.min, SUBNET_BITS.max)
  if (subnetProblem) problems.push(`WARREN_SANDBOX_SUBNET ${subnetProblem}, got "${settings.subnet}"`)
  // The last uid of the range must still be a uid (2^32 - 1 is the kernel's "no uid").
  const uids = SANDBOX_UID_COUNT + settings.rootRanges * 65_536
  if (settings.uidBase + uids > 2 ** 32 - 1) problems.push(`WARREN_SANDBOX_UID_BASE leaves no room for ${uids} uids below 4294967295${settings.rootRanges ? ` (${settings.rootRanges} WARREN_SANDBOX_ROOT_RANGES of 65536)` : ''}, got "${settings.uidBase}"`)
  if (settings.diskMb > 0 && settings.diskMb < 16) problems.push(`WARREN_WORKSPACE_DISK_MB must be 0 (no quota) or at least 16, got "${env.WARREN_WORKSPACE_DISK_MB}"`)
  if (problems.length > 0) throw new Error(`Invalid configuration:\n  - ${problems.join('\n  - ')}`)
  return settings
}
