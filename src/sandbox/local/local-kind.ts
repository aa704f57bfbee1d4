import path from 'node:path'
import { configuredImagePuller } from '../../images/image-puller.ts'
import type { ProviderKind } from '../providers.ts'
import { createLocalProvider, type LocalStackOptions } from './create-local.ts'
import { localSettings } from './local-settings.ts'

/** Local settings a caller fixes over the configured ones (tests give each instance its own prefix and uids). */
export type LocalFixed = Partial<Pick<LocalStackOptions, 'prefix' | 'subnet' | 'uidBase' | 'uidCount' | 'cgroupParent'>>

/**
 * The local provider as a kind of the registry (WARREN_SANDBOX_PROVIDER=local, the default):
 * bubblewrap sandboxes on this host, their workspaces under the data folder. Its settings
 * (local-settings.ts) are read and checked when configured, before anything is made. `fixed`
 * overrides them, for tests that run several instances on one host.
 */
export function localKind(fixed: LocalFixed = {}): ProviderKind {
  return {
    configure: ({ config, log, metrics }) => {
      const settings = localSettings(config.providerEnv)
      return () =>
        createLocalProvider({
          workspaceRoot: path.join(config.dataDir, 'workspaces'),
          prefix: settings.prefix,
          subnet: settings.subnet,
          uidBase: settings.uidBase,
          allowPrivate: settings.allowPrivate,
          maxWatches: settings.maxWatches,
          diskBytes: settings.diskMb * 1024 * 1024,
          images: configuredImagePuller(config, metrics?.images, log),
          rootRanges: settings.rootRanges,
          log,
          ...fixed,
        })
    },
  }
}
