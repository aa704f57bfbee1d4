import type { SandboxProvider } from '../sandbox/sandbox.ts'
import type { SnapshotInfo, WorkspaceSnapshots } from './workspace-snapshots.ts'

/**
 * What the files of a workspace coming back (reclaimed, failed, or taken over from another node)
 * start from, readied before its sandbox is created over them: `restored`, the snapshot unpacked
 * (null when none was); `rebuilding`, nothing of it to restore, so it starts over from its
 * creation state (repository, seed files, template setup) rather than fail as a lost workspace.
 */
export async function filesOnReturn(d: { provider: SandboxProvider; snapshots: WorkspaceSnapshots | undefined }, id: string, takenOver: boolean): Promise<{ restored: SnapshotInfo | null; rebuilding: boolean }> {
  const { provider, snapshots } = d
  // A copy this node kept from an earlier hold of the session (it was paused or killed past its
  // lease since) is stale: the snapshot is what the nodes that ran it since left.
  if (snapshots && takenOver && (await snapshots.latest(id))) await provider.deleteWorkspace(id)
  // Taken over from a node that is gone: its files come back from the last snapshot.
  const restored = snapshots && (await snapshots.restore(id)) ? await snapshots.latest(id) : null
  // No snapshot yet (its first turn never settled) and no folder here. Only with snapshots
  // (several nodes): a folder this node kept and lost still fails.
  const rebuilding = !restored && takenOver && snapshots !== undefined && !(await snapshots.latest(id)) && (await provider.workspace(id).list('')) === null
  return { restored, rebuilding }
}
