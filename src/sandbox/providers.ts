import type { Config } from '../config.ts'
import type { Log } from '../shared/log.ts'
import type { Metrics } from '../shared/metrics.ts'
import type { SandboxProvider } from './sandbox.ts'
import { localKind } from './local/local-kind.ts'

/** What every kind of provider is made from: the deployment's configuration and the service's log. */
export type ProviderContext = {
  config: Config
  /** The service's log: a provider's refusals and failed clean-ups. */
  log: Log
  /** The node's metrics, for what a provider counts of its own (the local provider's image cache); absent outside a service. */
  metrics?: Metrics
}

/**
 * One kind of sandbox provider. configure parses and checks the kind's own settings, touching
 * nothing (throws an Error saying which setting is wrong and why), and returns what brings the
 * provider up: a bad setting stops the start before the store or the host is touched.
 */
export type ProviderKind = {
  configure(ctx: ProviderContext): () => Promise<SandboxProvider>
}

/** The kinds of provider a deployment may name (WARREN_SANDBOX_PROVIDER), by name. */
export type ProviderRegistry = Readonly<Record<string, ProviderKind>>

/** Every kind this build of Warren has. A Kubernetes or remote provider is one more entry here. */
export const PROVIDER_KINDS: ProviderRegistry = {
  local: localKind(),
}

/**
 * Configures the provider of kind `kind` from `registry` (PROVIDER_KINDS unless a caller, a test,
 * passes its own) and returns what brings it up. Throws an Error naming the setting and the kinds
 * there are when `kind` is none of them, and the kind's own error when its settings are wrong.
 */
export function configureProvider(kind: string, ctx: ProviderContext, registry: ProviderRegistry = PROVIDER_KINDS): () => Promise<SandboxProvider> {
  const chosen = Object.hasOwn(registry, kind) ? registry[kind] : undefined
  if (!chosen) throw new Error(`Invalid configuration:\n  - WARREN_SANDBOX_PROVIDER must be one of ${Object.keys(registry).map((k) => `"${k}"`).join(', ')}, got "${kind}"`)
  return chosen.configure(ctx)
}
