// Environment profiles (write-only variables) and templates (files, a repository, a setup script).
import { ok, when } from '../api.ts'
import { useSdk } from '../app.tsx'
import { useAction, useLoad } from '../hooks.ts'
import { Empty, ErrorLine, Header } from '../ui.tsx'

export function EnvironmentsPage() {
  const sdk = useSdk()
  const profiles = useLoad(() => ok(sdk.api.GET('/v1/environment-profiles', { params: { query: { limit: 100 } } })))
  const templates = useLoad(() => ok(sdk.api.GET('/v1/environment-templates', { params: { query: { limit: 100 } } })))
  const action = useAction()
  return (
    <section>
      <Header title="Environments" />
      <ErrorLine error={action.error} />
      <h2>Profiles</h2>
      <ErrorLine error={profiles.error} />
      {profiles.data?.data.length === 0 && <Empty>No profile.</Empty>}
      {!!profiles.data?.data.length && (
        <table class="list">
          <thead><tr><th>Name</th><th>Variables</th><th>Created</th><th /></tr></thead>
          <tbody>
            {profiles.data.data.map((p) => (
              <tr key={p.id}>
                <td>{p.name}</td>
                <td>{p.keys.map((k) => <span key={k} class="chip mono">{k}</span>)}</td>
                <td class="muted">{when(p.created_at)}</td>
                <td><button class="small danger" onClick={() => confirm(`Delete ${p.name}?`) && action.run(async () => (await ok(sdk.api.DELETE('/v1/environment-profiles/{profile_id}', { params: { path: { profile_id: p.id } } })), profiles.reload()))}>Delete</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h2>Templates</h2>
      <ErrorLine error={templates.error} />
      {templates.data?.data.length === 0 && <Empty>No template.</Empty>}
      {!!templates.data?.data.length && (
        <table class="list">
          <thead><tr><th>Name</th><th>Repository</th><th>Files</th><th>Profiles</th><th>Updated</th><th /></tr></thead>
          <tbody>
            {templates.data.data.map((t) => (
              <tr key={t.id}>
                <td>{t.name}{t.setup && <div class="muted small mono clip">{t.setup}</div>}</td>
                <td class="mono small">{t.repo ? `${t.repo.full_name}@${t.repo.branch}` : '—'}</td>
                <td>{t.files.length}</td>
                <td>{t.profiles.map((p) => <span key={p} class="chip">{p}</span>)}</td>
                <td class="muted">{when(t.updated_at)}</td>
                <td><button class="small danger" onClick={() => confirm(`Delete ${t.name}?`) && action.run(async () => (await ok(sdk.api.DELETE('/v1/environment-templates/{template_id}', { params: { path: { template_id: t.id } } })), templates.reload()))}>Delete</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}
