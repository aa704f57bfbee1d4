import type { Deps } from '../deps.ts'
import { withEvents } from '../events/record-event.ts'
import type { ImageProgress } from '../sandbox/sandbox.ts'
import type { Log } from '../shared/log.ts'
import { patchWorkspace } from './workspaces.store.ts'

/** At most one progress event a second: a pull reports per chunk, the log wants a trace of it. */
export const IMAGE_PROGRESS_GAP_MS = 1000

export type ImageProgressRecorder = {
  /** The provider's onImageProgress: records this one unless one was recorded less than a gap ago (the last layer's always is). */
  report(p: ImageProgress): void
  /** No more reports are recorded (create settled). */
  close(): void
  /** Resolves once every report taken is recorded: they come before the sandbox.created that follows. */
  settled(): Promise<void>
}

/**
 * Records the pull of a workspace's image as `sandbox.image_progress` events, and the workspace as
 * `pending` while it comes (a restore waits on its image as a first start does). A failure to
 * record is logged, never the bring-up's failure: progress is what a person watches, not state.
 */
export function imageProgressRecorder(opts: Pick<Deps, 'store' | 'bus'> & { log?: Log; sessionId: string; orgId: string; pending: boolean }): ImageProgressRecorder {
  const { store, bus, sessionId, orgId } = opts
  let pending = opts.pending
  let closed = false
  let lastAt = -Infinity
  let chain = Promise.resolve()
  const record = async (p: ImageProgress) => {
    await withEvents(store, bus, async (trx, rec) => {
      if (!pending) await patchWorkspace(trx, sessionId, { state: 'pending' })
      pending = true
      await rec({
        orgId,
        sessionId,
        type: 'sandbox.image_progress',
        payload: { state: 'pending', ref: p.ref, bytes: p.bytes, totalBytes: p.totalBytes, layers: p.layers, layersLeft: p.layersLeft },
      })
    })
  }
  return {
    report(p) {
      const now = Date.now()
      if (closed || (p.layersLeft > 0 && now - lastAt < IMAGE_PROGRESS_GAP_MS)) return
      lastAt = now
      chain = chain.then(() => record({ ...p })).catch((err) => opts.log?.warn({ err, component: 'workspaces', session_id: sessionId }, 'recording the progress of an image pull failed'))
    },
    close() {
      closed = true
    },
    settled: () => chain,
  }
}
