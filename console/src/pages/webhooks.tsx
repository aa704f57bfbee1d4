// Webhook subscriptions with their delivery counters; the signing secret is shown once, at creation.
import { useState } from 'preact/hooks'
import { ok, when } from '../api.ts'
import { useSdk } from '../app.tsx'
import { useAction, useLoad } from '../hooks.ts'
import { Empty, ErrorLine, Header, RemoveButton } from '../ui.tsx'

const EVENTS = ['session.created', 'session.action_required', 'session.working', 'session.idle', 'session.failed', 'turn.completed', 'turn.failed'] as const
type WebhookEvent = (typeof EVENTS)[number]

export function WebhooksPage() {
  const sdk = useSdk()
  const list = useLoad(() => ok(sdk.api.GET('/v1/webhooks', { params: { query: { limit: 100 } } })))
  const action = useAction()
  const [url, setUrl] = useState('')
  const [events, setEvents] = useState<WebhookEvent[]>(['session.action_required', 'turn.completed', 'turn.failed'])
  const [secret, setSecret] = useState<string | null>(null)
  return (
    <section>
      <Header title="Webhooks" />
      <form class="card form" onSubmit={(e) => {
        e.preventDefault()
        void action.run(async () => {
          const w = await ok(sdk.api.POST('/v1/webhooks', { body: { url, events } }))
          setSecret(w.secret ?? null)
          setUrl('')
          list.reload()
        })
      }}>
        <label class="wide">Address<input name="url" placeholder="https://example.com/warren" value={url} onInput={(e) => setUrl(e.currentTarget.value)} required /></label>
        <fieldset class="wide checks">
          <legend>Events</legend>
          {EVENTS.map((ev) => (
            <label key={ev} class="check">
              <input type="checkbox" checked={events.includes(ev)} onChange={(e) => setEvents(e.currentTarget.checked ? [...events, ev] : events.filter((x) => x !== ev))} />
              <span class="mono small">{ev}</span>
            </label>
          ))}
        </fieldset>
        <ErrorLine error={action.error} />
        <div class="wide"><button type="submit" class="primary" disabled={action.busy || events.length === 0}>Subscribe</button></div>
      </form>
      {secret && <p class="card notice-box">Signing secret, shown this once: <span class="mono">{secret}</span> <button class="small ghost" onClick={() => setSecret(null)}>Hide</button></p>}
      <ErrorLine error={list.error} />
      {list.data?.data.length === 0 && <Empty>No subscription.</Empty>}
      {!!list.data?.data.length && (
        <table class="list">
          <thead><tr><th>Address</th><th>Events</th><th>Pending</th><th>Dead</th><th>Last error</th><th>Created</th><th /></tr></thead>
          <tbody>
            {list.data.data.map((w) => (
              <tr key={w.id}>
                <td class="mono small">{w.url}{!w.active && <span class="chip">inactive</span>}</td>
                <td>{w.events.map((e) => <span key={e} class="chip">{e}</span>)}</td>
                <td data-testid="pending">{w.delivery.pending}</td>
                <td data-testid="dead">{w.delivery.dead}</td>
                <td class="small">{w.delivery.last_error ? `${w.delivery.last_error} (${when(w.delivery.last_failed_at)})` : '—'}</td>
                <td class="muted">{when(w.created_at)}</td>
                <td><RemoveButton label="Remove" question="Remove this subscription?" action={action} remove={() => ok(sdk.api.DELETE('/v1/webhooks/{webhook_id}', { params: { path: { webhook_id: w.id } } }))} done={list.reload} /></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}
