/** Results given to the model at most. */
const MAX_RESULTS = 20
const SEARCH_TIMEOUT_MS = 15_000

type SearxResult = { title?: string; url?: string; content?: string; img_src?: string; thumbnail_src?: string; resolution?: string; img_format?: string }

/**
 * Asks the deployment's search backend (the SearXNG JSON API at WARREN_SEARCH_URL): web results
 * as titles, addresses and snippets; image results with their image address and size.
 */
export async function webSearch(searchUrl: string, args: Record<string, unknown>, kind: 'web' | 'images', signal: AbortSignal): Promise<{ output: string; isError: boolean; summary: string }> {
  const query = typeof args.query === 'string' ? args.query.trim() : ''
  if (!query) return { output: `${kind === 'web' ? 'web_search' : 'image_search'} needs "query".`, isError: true, summary: 'no query' }
  const count = typeof args.count === 'number' && args.count > 0 ? Math.min(Math.floor(args.count), MAX_RESULTS) : 10
  const url = new URL('search', searchUrl.endsWith('/') ? searchUrl : `${searchUrl}/`)
  url.searchParams.set('q', query)
  url.searchParams.set('format', 'json')
  if (kind === 'images') url.searchParams.set('categories', 'images')
  let body: { results?: SearxResult[] }
  try {
    const res = await fetch(url, { signal: AbortSignal.any([signal, AbortSignal.timeout(SEARCH_TIMEOUT_MS)]), headers: { accept: 'application/json' } })
    if (!res.ok) return { output: `The search backend answered ${res.status}.`, isError: true, summary: `search failed (${res.status})` }
    body = (await res.json()) as { results?: SearxResult[] }
  } catch (err) {
    if (signal.aborted) throw signal.reason
    return { output: `The search backend could not be reached: ${(err as Error).message}.`, isError: true, summary: 'search failed' }
  }
  const results = (body.results ?? []).filter((r) => typeof r.url === 'string').slice(0, count)
  if (results.length === 0) return { output: `No results for "${query}".`, isError: false, summary: '0 results' }
  const lines = results.map((r, i) =>
    kind === 'web'
      ? `${i + 1}. ${r.title ?? r.url}\n   ${r.url}${r.content ? `\n   ${r.content.replace(/\s+/g, ' ').trim()}` : ''}`
      : `${i + 1}. ${r.title ?? r.url}\n   image: ${r.img_src ?? r.url}${r.resolution ? ` (${r.resolution})` : ''}${r.img_format ? ` ${r.img_format}` : ''}\n   page: ${r.url}${r.thumbnail_src ? `\n   thumbnail: ${r.thumbnail_src}` : ''}`,
  )
  return { output: `Results for "${query}":\n\n${lines.join('\n')}`, isError: false, summary: `${results.length} results` }
}
