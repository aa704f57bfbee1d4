import type { Metrics, SandboxCounts } from '../shared/metrics.ts'
import type { Sandbox, SandboxProvider } from './sandbox.ts'

/**
 * The provider as it was, timing each start and counting its sandboxes by state for the metrics.
 * States are read from the sandboxes themselves at scrape time, so a pause, a resume or a destroy
 * needs no bookkeeping of its own and the gauge cannot drift from the truth.
 */
export function countedProvider(provider: SandboxProvider, metrics: Metrics): SandboxProvider {
  const live = new Set<Sandbox>()
  let starting = 0
  const prune = () => {
    for (const s of live) if (s.state === 'destroyed') live.delete(s)
  }
  metrics.countSandboxesWith(() => {
    prune()
    const counts: SandboxCounts = { starting, running: 0, paused: 0 }
    for (const s of live) if (s.state !== 'destroyed') counts[s.state]++
    return counts
  })
  return {
    name: provider.name,
    claim: provider.claim,
    async create(spec) {
      starting++
      const end = metrics.sandboxStartSeconds.startTimer()
      try {
        const sandbox = await provider.create(spec)
        end()
        // Pruned here too, so that a node nobody scrapes does not keep every sandbox it ever made.
        prune()
        live.add(sandbox)
        return sandbox
      } finally {
        starting--
      }
    },
    get: (id) => provider.get(id),
    workspace: (id) => provider.workspace(id),
    deleteWorkspace: (id) => provider.deleteWorkspace(id),
    packWorkspace: (id) => provider.packWorkspace(id),
    unpackWorkspace: (id, archive) => provider.unpackWorkspace(id, archive),
    cleanupOrphans: () => provider.cleanupOrphans(),
    report: () => provider.report(),
    close: () => provider.close(),
  }
}
