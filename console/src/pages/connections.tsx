// Model connections: the providers the organization's agents run on. Keys are write-only.
import { useState } from 'preact/hooks'
import { ok, when } from '../api.ts'
import { useSdk } from '../app.tsx'
import { useAction, useLoad } from '../hooks.ts'
import { Empty, ErrorLine, Header, RemoveButton } from '../ui.tsx'

type Provider = 'openai' | 'anthropic' | 'openai_compatible'

export function ConnectionsPage() {
  const sdk = useSdk()
  const list = useLoad(() => ok(sdk.api.GET('/v1/model-credentials', { params: { query: { limit: 100 } } })))
  const action = useAction()
  const [provider, setProvider] = useState<Provider>('openai')
  const [apiKey, setApiKey] = useState('')
  const [baseUrl, setBaseUrl] = useState('')
  const [models, setModels] = useState('')
  return (
    <section>
      <Header title="Model connections" />
      <form class="card form" onSubmit={(e) => {
        e.preventDefault()
        void action.run(async () => {
          const names = models.split(',').map((m) => m.trim()).filter(Boolean)
          await ok(sdk.api.POST('/v1/model-credentials', { body: { provider, api_key: apiKey, ...(baseUrl ? { base_url: baseUrl } : {}), ...(names.length ? { models: names } : {}) } }))
          setApiKey('')
          list.reload()
        })
      }}>
        <label>Provider
          <select name="provider" value={provider} onChange={(e) => setProvider(e.currentTarget.value as Provider)}>
            <option value="openai">OpenAI</option><option value="anthropic">Anthropic</option><option value="openai_compatible">OpenAI-compatible</option>
          </select>
        </label>
        <label>API key<input name="api_key" type="password" autocomplete="off" value={apiKey} onInput={(e) => setApiKey(e.currentTarget.value)} required /></label>
        <label>Address<input name="base_url" placeholder="default for the provider" value={baseUrl} onInput={(e) => setBaseUrl(e.currentTarget.value)} /></label>
        <label>Models<input name="models" placeholder="asked of the provider when blank" value={models} onInput={(e) => setModels(e.currentTarget.value)} /></label>
        <ErrorLine error={action.error} />
        <div class="wide"><button type="submit" class="primary" disabled={action.busy}>Connect</button></div>
      </form>
      <ErrorLine error={list.error} />
      {list.data?.data.length === 0 && <Empty>No connection yet: sessions need one to run.</Empty>}
      {!!list.data?.data.length && (
        <table class="list">
          <thead><tr><th>Name</th><th>Provider</th><th>Models</th><th>Key</th><th>Created</th><th /></tr></thead>
          <tbody>
            {list.data.data.map((c) => (
              <tr key={c.id}>
                <td>{c.name} {c.default && <span class="chip">default</span>}<div class="muted small mono">{c.base_url}</div></td>
                <td>{c.provider}</td>
                <td>{c.models.map((m) => <span key={m} class="chip">{m}</span>)}</td>
                <td class="mono small">{c.key_hint}</td>
                <td class="muted">{when(c.created_at)}</td>
                <td><RemoveButton label="Remove" question={`Remove ${c.name}?`} action={action} remove={() => ok(sdk.api.DELETE('/v1/model-credentials/{credential_id}', { params: { path: { credential_id: c.id } } }))} done={list.reload} /></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}
