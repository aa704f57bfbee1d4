// Environment profiles (write-only variables) and templates (files, a repository, a setup script).
import { useState } from 'preact/hooks'
import { ok, when } from '../api.ts'
import { useSdk } from '../app.tsx'
import { useAction, useLoad } from '../hooks.ts'
import { Empty, ErrorLine, Header, parsePairs, RemoveButton } from '../ui.tsx'

export function EnvironmentsPage() {
  const sdk = useSdk()
  const profiles = useLoad(() => ok(sdk.api.GET('/v1/environment-profiles', { params: { query: { limit: 100 } } })))
  const templates = useLoad(() => ok(sdk.api.GET('/v1/environment-templates', { params: { query: { limit: 100 } } })))
  const action = useAction()
  const [profileName, setProfileName] = useState('')
  const [variables, setVariables] = useState('')
  const [templateName, setTemplateName] = useState('')
  const [templateProfiles, setTemplateProfiles] = useState('')
  const [templateImage, setTemplateImage] = useState('')
  const [setup, setSetup] = useState('')
  return (
    <section>
      <Header title="Environments" />
      <ErrorLine error={action.error} />
      <h2>Profiles</h2>
      <form class="card form" onSubmit={(e) => {
        e.preventDefault()
        void action.run(async () => {
          await ok(sdk.api.POST('/v1/environment-profiles', { body: { name: profileName, env: parsePairs(variables, '=') } }))
          // Values are write-only: once sent they are never shown again, here or anywhere.
          setProfileName('')
          setVariables('')
          profiles.reload()
        })
      }}>
        <label>Name<input name="profile-name" value={profileName} onInput={(e) => setProfileName(e.currentTarget.value)} required /></label>
        <label class="wide">Variables (KEY=value, one a line; the values are never shown again)<textarea name="profile-env" rows={3} autocomplete="off" value={variables} onInput={(e) => setVariables(e.currentTarget.value)} /></label>
        <div class="wide"><button type="submit" class="primary" disabled={action.busy}>Create profile</button></div>
      </form>
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
                <td><RemoveButton question={`Delete ${p.name}?`} action={action} remove={() => ok(sdk.api.DELETE('/v1/environment-profiles/{profile_id}', { params: { path: { profile_id: p.id } } }))} done={profiles.reload} /></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h2>Templates</h2>
      <form class="card form" onSubmit={(e) => {
        e.preventDefault()
        void action.run(async () => {
          const names = templateProfiles.split(',').map((p) => p.trim()).filter(Boolean)
          await ok(sdk.api.POST('/v1/environment-templates', { body: { name: templateName, ...(names.length ? { profiles: names } : {}), ...(setup ? { setup } : {}), ...(templateImage.trim() ? { image: templateImage.trim() } : {}) } }))
          setTemplateName('')
          setTemplateProfiles('')
          setTemplateImage('')
          setSetup('')
          templates.reload()
        })
      }}>
        <label>Name (an existing name is replaced)<input name="template-name" value={templateName} onInput={(e) => setTemplateName(e.currentTarget.value)} required /></label>
        <label>Profiles (names or ids, comma-separated)<input name="template-profiles" value={templateProfiles} onInput={(e) => setTemplateProfiles(e.currentTarget.value)} /></label>
        <label class="wide">Image (an OCI reference, e.g. registry.example.com/team/go:1.22; empty: the host's system)<input name="template-image" value={templateImage} onInput={(e) => setTemplateImage(e.currentTarget.value)} placeholder="127.0.0.1:5000/tools/go:1.22" /></label>
        <label class="wide">Setup script (run once when a workspace first comes up)<textarea name="template-setup" rows={3} value={setup} onInput={(e) => setSetup(e.currentTarget.value)} /></label>
        <div class="wide"><button type="submit" class="primary" disabled={action.busy}>Save template</button></div>
      </form>
      <ErrorLine error={templates.error} />
      {templates.data?.data.length === 0 && <Empty>No template.</Empty>}
      {!!templates.data?.data.length && (
        <table class="list">
          <thead><tr><th>Name</th><th>Image</th><th>Repository</th><th>Files</th><th>Profiles</th><th>Updated</th><th /></tr></thead>
          <tbody>
            {templates.data.data.map((t) => (
              <tr key={t.id}>
                <td>{t.name}{t.setup && <div class="muted small mono clip">{t.setup}</div>}</td>
                <td class="mono small">{t.image ?? '—'}</td>
                <td class="mono small">{t.repo ? `${t.repo.full_name}@${t.repo.branch}` : '—'}</td>
                <td>{t.files.length}</td>
                <td>{t.profiles.map((p) => <span key={p} class="chip">{p}</span>)}</td>
                <td class="muted">{when(t.updated_at)}</td>
                <td><RemoveButton question={`Delete ${t.name}?`} action={action} remove={() => ok(sdk.api.DELETE('/v1/environment-templates/{template_id}', { params: { path: { template_id: t.id } } }))} done={templates.reload} /></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}
