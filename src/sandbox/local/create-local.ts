import { DEFAULT_SANDBOX_SUBNET, DEFAULT_SANDBOX_UID_BASE, SANDBOX_UID_COUNT } from './local-settings.ts'
import type { SandboxProvider } from '../sandbox.ts'
import type { Log } from '../../shared/log.ts'
import { startEgressProxy } from './egress-proxy.ts'
import { LocalSandboxProvider } from './local-provider.ts'
import type { ImageSource } from './image-root.ts'
import { localNetwork, type SandboxNetwork } from './network.ts'

export type LocalStackOptions = {
  /** Host folder holding every workspace (see LocalProviderOptions.workspaceRoot). */
  workspaceRoot: string
  /**
   * Names this deployment's host resources: network namespaces and veths (`<prefix>-…`), the
   * nftables table, cgroups. One running service per prefix on a host: start-up removes what
   * carries it and is not its own.
   */
  prefix?: string
  /** IPv4 CIDR the sandboxes' addresses come from (WARREN_SANDBOX_SUBNET); default DEFAULT_SANDBOX_SUBNET. */
  subnet?: string
  /** First host uid given to sandboxes (WARREN_SANDBOX_UID_BASE); default DEFAULT_SANDBOX_UID_BASE. */
  uidBase?: number
  /** How many uids from uidBase are this deployment's; default SANDBOX_UID_COUNT (tests packing instances on one host take fewer). */
  uidCount?: number
  /** The cgroup under which sandboxes' groups are made (LocalProviderOptions.cgroupParent); tests give their own. */
  cgroupParent?: string
  /** CIDRs of private addresses the workspaces may reach all the same (WARREN_SANDBOX_ALLOW_PRIVATE). */
  allowPrivate?: string[]
  /** See LocalProviderOptions.maxWatches (WARREN_WORKSPACE_MAX_WATCHES). */
  maxWatches?: number
  /** See LocalProviderOptions.diskBytes (WARREN_WORKSPACE_DISK_MB). */
  diskBytes?: number
  /** The service's log: the egress proxy's refusals, the provider's failed clean-ups. */
  log?: Log
  /** The node's image cache, for sandboxes on an image (LocalProviderOptions.images). */
  images?: ImageSource
  /** See LocalProviderOptions.rootRanges (WARREN_SANDBOX_ROOT_RANGES). */
  rootRanges?: number
}

/**
 * The local provider with its network: the egress proxy first (it must exist before a sandbox
 * can be attached), then the namespaces and rules, then bubblewrap on top.
 */
export async function createLocalProvider(opts: LocalStackOptions): Promise<SandboxProvider> {
  const prefix = opts.prefix ?? 'wr'
  const subnet = opts.subnet ?? DEFAULT_SANDBOX_SUBNET
  let network: SandboxNetwork | null = null
  // Our own subnet is refused whatever allowPrivate says: no sandbox reaches another through the
  // proxy. Another node's subnet on this host is a private range, which the address policy refuses
  // unless allowPrivate covers it: WARREN_SANDBOX_ALLOW_PRIVATE must leave other nodes' subnets out
  // (the proxy would connect from the host, which their sandboxes' rules admit as previews).
  const proxy = await startEgressProxy({ host: '127.0.0.1', resolveSandbox: (remote, local) => network?.resolve(remote, local) ?? null, allowPrivate: opts.allowPrivate ?? [], forbidden: [subnet], logger: opts.log })
  network = localNetwork({ proxy, prefix, subnet, table: prefix === 'wr' ? 'warren' : `warren_${prefix}`, ...(opts.log ? { log: opts.log } : {}) })
  const provider = new LocalSandboxProvider({
    workspaceRoot: opts.workspaceRoot,
    claim: { prefix, subnet },
    network,
    ...(opts.log ? { log: opts.log } : {}),
    ...(opts.images ? { images: opts.images } : {}),
    ...(opts.rootRanges !== undefined ? { rootRanges: opts.rootRanges } : {}),
    prefix: cgroupPrefix(prefix),
    uidBase: opts.uidBase ?? DEFAULT_SANDBOX_UID_BASE,
    uidCount: opts.uidCount ?? SANDBOX_UID_COUNT,
    ...(opts.maxWatches !== undefined ? { maxWatches: opts.maxWatches } : {}),
    ...(opts.diskBytes !== undefined ? { diskBytes: opts.diskBytes } : {}),
    ...(opts.cgroupParent !== undefined ? { cgroupParent: opts.cgroupParent } : {}),
  })
  const close = provider.close.bind(provider)
  provider.close = async () => {
    await close()
    await proxy.close()
  }
  return provider
}

/**
 * The cgroup prefix of a deployment, `warren-<prefix>-` for the default one too: start-up clean-up
 * removes every group carrying it, so it must be the start of no other deployment's (a bare
 * `warren-` would be everyone's).
 */
export function cgroupPrefix(prefix: string): string {
  return `warren-${prefix}-`
}
