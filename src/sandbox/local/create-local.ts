import type { SandboxProvider } from '../sandbox.ts'
import { startEgressProxy, type ProxyLogger } from './egress-proxy.ts'
import { LocalSandboxProvider } from './local-provider.ts'
import { localNetwork, SANDBOX_POOL, type SandboxNetwork } from './network.ts'

export type LocalStackOptions = {
  /** Host folder holding every workspace (see LocalProviderOptions.workspaceRoot). */
  workspaceRoot: string
  /**
   * Names this deployment's host resources: network namespaces and veths (`<prefix>-…`), the
   * nftables table, cgroups. One running service per prefix on a host: start-up removes what
   * carries it and is not its own.
   */
  prefix?: string
  /** First host uid given to sandboxes. */
  uidBase?: number
  /** CIDRs of private addresses the workspaces may reach all the same (WARREN_SANDBOX_ALLOW_PRIVATE). */
  allowPrivate?: string[]
  logger?: ProxyLogger
}

/**
 * The local provider with its network: the egress proxy first (it must exist before a sandbox
 * can be attached), then the namespaces and rules, then bubblewrap on top.
 */
export async function createLocalProvider(opts: LocalStackOptions): Promise<SandboxProvider> {
  const prefix = opts.prefix ?? 'wr'
  let network: SandboxNetwork | null = null
  const proxy = await startEgressProxy({ host: '127.0.0.1', resolveSandbox: (remote, local) => network?.resolve(remote, local) ?? null, allowPrivate: opts.allowPrivate ?? false, forbidden: [SANDBOX_POOL], logger: opts.logger })
  network = localNetwork({ proxy, prefix, table: prefix === 'wr' ? 'warren' : `warren_${prefix}` })
  const provider = new LocalSandboxProvider({
    workspaceRoot: opts.workspaceRoot,
    network,
    prefix: cgroupPrefix(prefix),
    ...(opts.uidBase !== undefined ? { uidBase: opts.uidBase, uidCount: 1000 } : {}),
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
