import path from 'node:path'
import type { Warren } from './harness.ts'

/**
 * The host folder of a session's workspace, where the local provider keeps it under the data
 * folder: for host-level checks only (the service itself reads a workspace through the seam).
 */
export const hostWorkspace = (w: Pick<Warren, 'dataDir'>, sessionId: string): string => path.join(w.dataDir, 'workspaces', sessionId)
