import type { Db } from '../db/database.ts'
import { recordOutcomes, type DeliveryOutcome } from './deliveries.store.ts'

/** Outcomes gathered for one write: a write waits this long for more, unless this many are in. */
const RECORD_GATHER_MS = 5
const RECORD_BATCH = 64

/**
 * Attempts' outcomes written together, up to RECORD_BATCH gathered over RECORD_GATHER_MS, and
 * those that come in while one write runs go in the next: at high rates many attempts share a
 * commit (on SQLite a commit, and the WAL pages it writes, cost far more than the rows). Until its
 * outcome is written a delivery stays claimed, so nothing sends it again meanwhile; a crash before
 * then sends it again once its claim runs out, as deliveries are at least once. Each record()
 * resolves once its outcome is committed.
 */
export function outcomeRecorder(db: Db) {
  let batch: { outcomes: DeliveryOutcome[]; written: Promise<void>; settle: (err?: unknown) => void } | null = null
  let writing = false
  let full: (() => void) | null = null
  async function write(): Promise<void> {
    while (batch) {
      if (batch.outcomes.length < RECORD_BATCH) {
        let timer: NodeJS.Timeout | undefined
        await new Promise<void>((r) => {
          full = r
          timer = setTimeout(r, RECORD_GATHER_MS)
        })
        clearTimeout(timer)
        full = null
      }
      const b = batch
      batch = null
      await recordOutcomes(db, b.outcomes).then(() => b.settle(), b.settle)
    }
    writing = false
  }
  return {
    record(o: DeliveryOutcome): Promise<void> {
      if (!batch) {
        let settle!: (err?: unknown) => void
        const written = new Promise<void>((resolve, reject) => (settle = (err) => (err === undefined ? resolve() : reject(err))))
        batch = { outcomes: [], written, settle }
      }
      batch.outcomes.push(o)
      if (batch.outcomes.length >= RECORD_BATCH) full?.()
      if (!writing) {
        writing = true
        void write()
      }
      return batch.written
    },
  }
}
