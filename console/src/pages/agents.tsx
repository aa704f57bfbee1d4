// Stored agents: named starting points for sessions (model, instructions, tools).
import { useState } from 'preact/hooks'
import { ok, when } from '../api.ts'
import { useSdk } from '../app.tsx'
import { useAction, useLoad } from '../hooks.ts'
import { Empty, ErrorLine, Header, RemoveButton } from '../ui.tsx'

export function AgentsPage() {
  const sdk = useSdk()
  const list = useLoad(() => ok(sdk.api.GET('/v1/agents', { params: { query: { limit: 100 } } })))
  const action = useAction()
  const [name, setName] = useState('')
  const [model, setModel] = useState('')
  const [instructions, setInstructions] = useState('')
  return (
    <section>
      <Header title="Agents" />
      <p class="muted">A stored agent is a named starting point; sessions start from one by its id. Tools are set through the API.</p>
      <form class="card form" onSubmit={(e) => {
        e.preventDefault()
        void action.run(async () => {
          await ok(sdk.api.POST('/v1/agents', { body: { name, model, ...(instructions ? { instructions } : {}) } }))
          setName('')
          setInstructions('')
          list.reload()
        })
      }}>
        <label>Name<input name="agent-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required /></label>
        <label>Model<input name="agent-model" placeholder="a model of a connection" value={model} onInput={(e) => setModel(e.currentTarget.value)} required /></label>
        <label class="wide">Instructions<textarea name="agent-instructions" rows={3} value={instructions} onInput={(e) => setInstructions(e.currentTarget.value)} /></label>
        <div class="wide"><button type="submit" class="primary" disabled={action.busy}>Create agent</button></div>
      </form>
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
                <td><RemoveButton question={`Delete ${a.name}?`} action={action} remove={() => ok(sdk.api.DELETE('/v1/agents/{agent_id}', { params: { path: { agent_id: a.id } } }))} done={list.reload} /></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}
