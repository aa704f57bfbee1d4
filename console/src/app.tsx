// The shell: sign-in until a token is kept for this tab, then the navigation and the current page.
import { createContext } from 'preact'
import { useContext, useEffect, useState } from 'preact/hooks'
import type { Warren } from '../../sdk/src/client.ts'
import { connect, describeError, REFUSED_EVENT, signIn, signOut, storedToken } from './api.ts'
import { href, onLinkClick, useRoute, type Route } from './router.ts'
import { SessionsPage } from './pages/sessions.tsx'
import { SessionPage } from './pages/session.tsx'
import { ConnectionsPage } from './pages/connections.tsx'
import { AgentsPage } from './pages/agents.tsx'
import { WebhooksPage } from './pages/webhooks.tsx'
import { EnvironmentsPage } from './pages/environments.tsx'

const SdkContext = createContext<Warren | null>(null)

export function useSdk(): Warren {
  const sdk = useContext(SdkContext)
  if (!sdk) throw new Error('no client: not signed in')
  return sdk
}

export function App() {
  const [sdk, setSdk] = useState<Warren | null>(() => {
    const token = storedToken()
    return token ? connect(token) : null
  })
  const [refused, setRefused] = useState(false)
  useEffect(() => {
    const onRefused = () => {
      if (!storedToken()) return
      signOut()
      setSdk(null)
      setRefused(true)
    }
    addEventListener(REFUSED_EVENT, onRefused)
    return () => removeEventListener(REFUSED_EVENT, onRefused)
  }, [])
  if (!sdk) return <SignIn refused={refused} onSignedIn={(s) => (setRefused(false), setSdk(s))} />
  return (
    <SdkContext.Provider value={sdk}>
      <Shell onSignOut={() => (signOut(), setSdk(null))} />
    </SdkContext.Provider>
  )
}

function SignIn({ onSignedIn, refused }: { onSignedIn: (sdk: Warren) => void; refused: boolean }) {
  const [token, setToken] = useState('')
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  return (
    <main class="signin">
      <form
        class="card"
        onSubmit={async (e) => {
          e.preventDefault()
          setBusy(true)
          setError(null)
          try {
            onSignedIn(await signIn(token))
          } catch (err) {
            setError(describeError(err))
          } finally {
            setBusy(false)
          }
        }}
      >
        <h1>Warren</h1>
        <p class="muted">Sign in with a personal access token. It is kept in this tab only and forgotten when the tab closes.</p>
        <label>
          Token
          <input name="token" type="password" autocomplete="off" placeholder="svc_pat_…" value={token} onInput={(e) => setToken(e.currentTarget.value)} required />
        </label>
        {refused && !error && <p class="error" role="alert">The service refused the token this tab kept (revoked or expired): sign in again.</p>}
        {error && <p class="error" role="alert">{error}</p>}
        <button type="submit" class="primary" disabled={busy}>{busy ? 'Checking…' : 'Sign in'}</button>
      </form>
    </main>
  )
}

const NAV: [Route, string][] = [
  [{ page: 'sessions' }, 'Sessions'],
  [{ page: 'connections' }, 'Model connections'],
  [{ page: 'agents' }, 'Agents'],
  [{ page: 'webhooks' }, 'Webhooks'],
  [{ page: 'environments' }, 'Environments'],
]

function Shell({ onSignOut }: { onSignOut: () => void }) {
  const route = useRoute()
  const active = route.page === 'session' ? 'sessions' : route.page
  return (
    <div class="shell">
      <nav class="sidebar">
        <a class="brand" href={href({ page: 'sessions' })} onClick={onLinkClick}>Warren</a>
        {NAV.map(([r, label]) => (
          <a key={r.page} href={href(r)} onClick={onLinkClick} class={active === r.page ? 'active' : ''}>{label}</a>
        ))}
        <div class="grow" />
        <ThemeToggle />
        <button class="ghost" onClick={onSignOut}>Sign out</button>
      </nav>
      <main class="content">
        {route.page === 'sessions' && <SessionsPage />}
        {route.page === 'session' && <SessionPage key={route.id} id={route.id} />}
        {route.page === 'connections' && <ConnectionsPage />}
        {route.page === 'agents' && <AgentsPage />}
        {route.page === 'webhooks' && <WebhooksPage />}
        {route.page === 'environments' && <EnvironmentsPage />}
      </main>
    </div>
  )
}

type Theme = 'system' | 'light' | 'dark'
const THEME_KEY = 'warren.theme'

/** Follows prefers-color-scheme until a person picks; the pick is kept in localStorage (not a secret). */
function ThemeToggle() {
  const [theme, setTheme] = useState<Theme>(() => (localStorage.getItem(THEME_KEY) as Theme | null) ?? 'system')
  useEffect(() => {
    if (theme === 'system') delete document.documentElement.dataset.theme
    else document.documentElement.dataset.theme = theme
    localStorage.setItem(THEME_KEY, theme)
  }, [theme])
  const next: Record<Theme, Theme> = { system: 'dark', dark: 'light', light: 'system' }
  return (
    <button class="ghost" title="Colour scheme" onClick={() => setTheme(next[theme])}>
      Theme: {theme}
    </button>
  )
}
