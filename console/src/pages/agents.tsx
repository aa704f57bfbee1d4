// Stored agents: named starting points for sessions (model, instructions, tools).
import { ok, when } from '../api.ts'
import { useSdk } from '../app.tsx'
import { useAction, useLoad } from '../hooks.ts'
import { Empty, ErrorLine, Header } from '../ui.tsx'

export function AgentsPage() {
  const sdk = useSdk()
  const list = useLoad(() => ok(sdk.api.GET('/v1/agents', { params: { query: { limit: 100 } } })))
  const action = useAction()
  return (
    <section>
      <Header title="Agents" />
      <p class="muted">Stored agents are created through the API (<span class="mono">POST /v1/agents</span>); sessions start from one by its id.</p>
      <ErrorLine error={list.error ?? action.error} />
      {list.data?.data.length === 0 && <Empty>No stored agent.</Empty>}
      {!!list.data?.data.length && (
        <table class="list">
          <thead><tr><th>Name</th><th>Model</th><th>Tools</th><th>Instructions</th><th>Created</th><th /></tr></thead>
          <tbody>
            {list.data.data.map((a) => (
              <tr key={a.id}>
                <td>{a.name}<div class="muted small mono">{a.id}</div></td>
                <td>{a.model}</td>
                <td>{a.tools.map((t) => <span key={t.name ?? t.type} class="chip">{t.name ?? t.type}</span>)}</td>
                <td class="clip">{a.instructions}</td>
                <td class="muted">{when(a.created_at)}</td>
                <td><button class="small danger" onClick={() => confirm(`Delete ${a.name}?`) && action.run(async () => (await ok(sdk.api.DELETE('/v1/agents/{agent_id}', { params: { path: { agent_id: a.id } } })), list.reload()))}>Delete</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}
