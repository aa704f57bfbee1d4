import { useCallback, useEffect, useState } from 'preact/hooks'
import { describeError } from './api.ts'

/** Loads with `load` (again on `reload()` or when `deps` change); the last error as a line to show. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []): { data: T | undefined; error: string | null; reload: () => void } {
  const [data, setData] = useState<T | undefined>(undefined)
  const [error, setError] = useState<string | null>(null)
  const [tick, setTick] = useState(0)
  useEffect(() => {
    let live = true
    load().then(
      (d) => live && (setData(d), setError(null)),
      (err) => live && setError(describeError(err)),
    )
    return () => {
      live = false
    }
  }, [tick, ...deps])
  return { data, error, reload: useCallback(() => setTick((t) => t + 1), []) }
}

/** Runs an action, keeping its error to show; returns whether it succeeded. */
export function useAction(): { run: (fn: () => Promise<unknown>) => Promise<boolean>; error: string | null; busy: boolean } {
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const run = useCallback(async (fn: () => Promise<unknown>) => {
    setBusy(true)
    setError(null)
    try {
      await fn()
      return true
    } catch (err) {
      setError(describeError(err))
      return false
    } finally {
      setBusy(false)
    }
  }, [])
  return { run, error, busy }
}
