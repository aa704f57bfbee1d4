import path from 'node:path'
import type { ProviderKind } from '../providers.ts'
import { createLocalProvider, type LocalStackOptions } from './create-local.ts'

/** Local settings a caller fixes over the configured ones (tests give each instance its own prefix and uids). */
export type LocalFixed = Partial<Pick<LocalStackOptions, 'prefix' | 'subnet' | 'uidBase' | 'uidCount' | 'cgroupParent'>>

/**
 * The local provider as a kind of the registry (WARREN_SANDBOX_PROVIDER=local, the default):
 * bubblewrap sandboxes on this host, their workspaces under the data folder. `fixed` overrides the
 * configured settings, for tests that run several instances on one host.
 */
export function localKind(fixed: LocalFixed = {}): ProviderKind {
  return {
    configure: ({ config, log }) => () =>
      createLocalProvider({
        workspaceRoot: path.join(config.dataDir, 'workspaces'),
        prefix: config.sandboxPrefix,
        subnet: config.sandboxSubnet,
        uidBase: config.sandboxUidBase,
        allowPrivate: config.sandboxAllowPrivate,
        maxWatches: config.workspaceMaxWatches,
        diskBytes: config.workspaceDiskMb * 1024 * 1024,
        log,
        ...fixed,
      }),
  }
}
