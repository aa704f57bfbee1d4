// Small pieces every page uses.
import type { ComponentChildren } from 'preact'

export function Status({ status }: { status: string }) {
  return <span class={`badge status-${status}`}>{status.replace('_', ' ')}</span>
}

export function ErrorLine({ error }: { error: string | null }) {
  return error ? <p class="error" role="alert">{error}</p> : null
}

export function Header({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <header class="page-header">
      <h1>{title}</h1>
      <div class="actions">{children}</div>
    </header>
  )
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty muted">{children}</p>
}

/** `key=value` lines (or comma-separated) into an object; blank input is no metadata. */
export function parsePairs(text: string, sep: '=' | ':'): Record<string, string> {
  const out: Record<string, string> = {}
  for (const part of text.split(/[\n,]/).map((p) => p.trim()).filter(Boolean)) {
    const at = part.indexOf(sep)
    if (at <= 0) throw new Error(`"${part}" is not key${sep}value`)
    out[part.slice(0, at).trim()] = part.slice(at + 1).trim()
  }
  return out
}

export const json = (v: unknown): string => (typeof v === 'string' ? v : JSON.stringify(v, null, 2))

/**
 * A row's remove button: asks `question` first, then `remove()` through the page's action (whose
 * error line shows a refusal), then `done()` (the list read again).
 */
export function RemoveButton({ label = 'Delete', question, action, remove, done }: { label?: string; question: string; action: { run: (fn: () => Promise<unknown>) => Promise<boolean> }; remove: () => Promise<unknown>; done: () => void }) {
  return (
    <button class="small danger" onClick={() => confirm(question) && action.run(async () => (await remove(), done()))}>
      {label}
    </button>
  )
}
