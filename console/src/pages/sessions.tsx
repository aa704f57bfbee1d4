// The sessions list: status, title, labels; filters by status and metadata; a new session.
import { useState } from 'preact/hooks'
import { ok, when } from '../api.ts'
import { useSdk } from '../app.tsx'
import { useAction, useLoad } from '../hooks.ts'
import { href, navigate, onLinkClick } from '../router.ts'
import { Empty, ErrorLine, Header, parsePairs, Status } from '../ui.tsx'

const STATUSES = ['idle', 'working', 'requires_action', 'failed'] as const
type SessionStatus = (typeof STATUSES)[number]
const SOURCES = ['api', 'console', 'cli'] as const
type Source = (typeof SOURCES)[number]

export function SessionsPage() {
  const sdk = useSdk()
  const [status, setStatus] = useState<SessionStatus | ''>('')
  const [source, setSource] = useState<Source | ''>('')
  const [labels, setLabels] = useState('')
  const [draft, setDraft] = useState('')
  const [creating, setCreating] = useState(false)
  const metadata = labels.split(',').map((l) => l.trim()).filter((l) => l.includes(':'))
  const list = useLoad(
    () => ok(sdk.api.GET('/v1/sessions', { params: { query: { limit: 100, ...(status ? { status } : {}), ...(source ? { source } : {}), ...(metadata.length ? { metadata } : {}) } } })),
    [status, source, metadata.join(',')],
  )
  return (
    <section>
      <Header title="Sessions">
        <button class="primary" onClick={() => setCreating(!creating)}>{creating ? 'Close' : 'New session'}</button>
      </Header>
      {creating && <NewSession />}
      <form class="filters" onSubmit={(e) => {
        e.preventDefault()
        setLabels(draft)
      }}>
        <label>
          Status
          <select name="status" value={status} onChange={(e) => setStatus(e.currentTarget.value as SessionStatus | '')}>
            <option value="">any</option>
            {STATUSES.map((s) => <option key={s} value={s}>{s.replace('_', ' ')}</option>)}
          </select>
        </label>
        <label>
          Source
          <select name="source" value={source} onChange={(e) => setSource(e.currentTarget.value as Source | '')}>
            <option value="">any</option>
            {SOURCES.map((s) => <option key={s} value={s}>{s}</option>)}
          </select>
        </label>
        <label class="grow">
          Metadata
          <input name="metadata-filter" placeholder="team:core, env:staging" value={draft} onInput={(e) => setDraft(e.currentTarget.value)} onBlur={() => setLabels(draft)} />
        </label>
        <button type="submit" class="ghost" onClick={() => (draft === labels ? list.reload() : undefined)}>Apply</button>
      </form>
      <ErrorLine error={list.error} />
      {list.data && list.data.data.length === 0 && <Empty>No sessions match.</Empty>}
      {list.data && list.data.data.length > 0 && (
        <table class="list sessions">
          <thead>
            <tr><th>Status</th><th>Title</th><th>Labels</th><th>Source</th><th>Created</th></tr>
          </thead>
          <tbody>
            {list.data.data.map((s) => (
              <tr key={s.id}>
                <td><Status status={s.status} /></td>
                <td>
                  <a href={href({ page: 'session', id: s.id })} onClick={onLinkClick}>{s.title || <span class="mono">{s.id}</span>}</a>
                </td>
                <td>{Object.entries(s.metadata ?? {}).map(([k, v]) => <span key={k} class="chip">{k}: {String(v)}</span>)}</td>
                <td class="muted">{s.source ?? 'api'}</td>
                <td class="muted">{when(s.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}

function NewSession() {
  const sdk = useSdk()
  const [title, setTitle] = useState('')
  const [mode, setMode] = useState<'auto' | 'ask' | 'read_only'>('ask')
  const [metadata, setMetadata] = useState('')
  const [input, setInput] = useState('')
  const [image, setImage] = useState('')
  const action = useAction()
  return (
    <form
      class="card form"
      onSubmit={(e) => {
        e.preventDefault()
        let id = ''
        void action.run(async () => {
          const meta = parsePairs(metadata, '=')
          const s = await ok(sdk.api.POST('/v1/sessions', {
            body: { ...(title ? { title } : {}), agent: { approval_mode: mode }, ...(Object.keys(meta).length ? { metadata: meta } : {}), ...(input ? { input } : {}), ...(image.trim() ? { environment: { image: image.trim() } } : {}) },
          }))
          id = s.id
        }).then((done) => done && navigate(href({ page: 'session', id })))
      }}
    >
      <label>Title<input name="title" value={title} onInput={(e) => setTitle(e.currentTarget.value)} placeholder="Fix the flaky test" /></label>
      <label>
        Approvals
        <select name="approval_mode" value={mode} onChange={(e) => setMode(e.currentTarget.value as typeof mode)}>
          <option value="ask">ask before writing tools</option>
          <option value="auto">auto</option>
          <option value="read_only">read only</option>
        </select>
      </label>
      <label>Metadata<input name="metadata" value={metadata} onInput={(e) => setMetadata(e.currentTarget.value)} placeholder="team=core, ticket=42" /></label>
      <label class="wide">Image (optional: an OCI reference the workspace runs on; empty: the template's or the deployment's default, else the host's system)<input name="image" value={image} onInput={(e) => setImage(e.currentTarget.value)} placeholder="127.0.0.1:5000/tools/go:1.22" /></label>
      <label class="wide">First message (optional)<textarea name="input" rows={2} value={input} onInput={(e) => setInput(e.currentTarget.value)} /></label>
      <ErrorLine error={action.error} />
      <div class="wide"><button type="submit" class="primary" disabled={action.busy}>Create session</button></div>
    </form>
  )
}
