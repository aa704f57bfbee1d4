// Client routes under /console (the service answers index.html for each): a path in history, read
// back as a route. No library: five pages do not need one.
import { useEffect, useState } from 'preact/hooks'

export const BASE = '/console'

export type Route =
  | { page: 'sessions' }
  | { page: 'session'; id: string }
  | { page: 'connections' }
  | { page: 'agents' }
  | { page: 'webhooks' }
  | { page: 'environments' }

export function parse(pathname: string): Route {
  const rest = pathname.startsWith(BASE) ? pathname.slice(BASE.length) : pathname
  const [first, second] = rest.split('/').filter(Boolean)
  if (first === 'sessions' && second) return { page: 'session', id: decodeURIComponent(second) }
  if (first === 'connections' || first === 'agents' || first === 'webhooks' || first === 'environments') return { page: first }
  return { page: 'sessions' }
}

export function href(route: Route): string {
  return route.page === 'session' ? `${BASE}/sessions/${encodeURIComponent(route.id)}` : route.page === 'sessions' ? `${BASE}/` : `${BASE}/${route.page}`
}

export function navigate(to: string): void {
  history.pushState(null, '', to)
  dispatchEvent(new PopStateEvent('popstate'))
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parse(location.pathname))
  useEffect(() => {
    const on = () => setRoute(parse(location.pathname))
    addEventListener('popstate', on)
    return () => removeEventListener('popstate', on)
  }, [])
  return route
}

/** A link that moves within the console without reloading it. */
export function onLinkClick(e: MouseEvent): void {
  const a = (e.currentTarget as HTMLAnchorElement)
  if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || a.target === '_blank') return
  e.preventDefault()
  navigate(a.pathname)
}
