import type { Sandbox } from '../../sandbox/sandbox.ts'
import { quote } from '../../shared/sh-quote.ts'
import { htmlToMarkdown } from './html-to-markdown.ts'

/** Bytes read of a page at most: enough for any article, never the whole of a large download. */
const MAX_BYTES = 2 * 1024 * 1024
const DEFAULT_MAX_CHARS = 50_000
const FETCH_TIMEOUT_S = 30
/** Marks curl's report of the transfer on stderr, after anything curl itself complained about. */
const META = 'WARREN-FETCH-META '

export type FetchOutcome = { output: string; isError: boolean; summary: string }

/** The host a URL names, for permission rules; null when it is not an http(s) URL. */
export function urlHost(url: unknown): string | null {
  if (typeof url !== 'string') return null
  try {
    const u = new URL(url)
    // As the proxy judges it: no brackets, no trailing dot (`host.` is `host`), lower case.
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase() : null
  } catch {
    return null
  }
}

/**
 * Fetches a page from inside the session's sandbox, so that it goes out exactly as the workspace
 * does: through the egress proxy, which holds the workspace's domain allowlist and deny rules,
 * refuses loopback, link-local and private addresses (unless the deployment allows them), and
 * judges every redirect again as a request of its own. Nothing bypasses the proxy (`--noproxy ''`
 * overrides NO_PROXY). The bytes come back to the service, which makes readable text of them.
 */
export async function webFetch(sandbox: Sandbox, args: Record<string, unknown>, signal: AbortSignal): Promise<FetchOutcome> {
  const url = args.url
  if (urlHost(url) === null) return { output: 'web_fetch needs "url", an http(s) address.', isError: true, summary: 'refused: not an http(s) url' }
  const maxChars = typeof args.max_chars === 'number' && args.max_chars > 0 ? Math.min(Math.floor(args.max_chars), 200_000) : DEFAULT_MAX_CHARS
  const command = [
    'curl -sS -L --max-redirs 5 --proto =http,https --proto-redir =http,https --noproxy "" --compressed',
    `--max-time ${FETCH_TIMEOUT_S} -A 'Mozilla/5.0 (compatible; Warren web_fetch)'`,
    `-w ${quote(`%{stderr}\\n${META}%{http_code} %{content_type}\\n%{url_effective}\\n%header{x-warren-egress}\\n`)}`,
    `${quote(String(url))} | head -c ${MAX_BYTES + 4096}`,
  ].join(' ')
  const res = await sandbox.exec({ command, timeoutMs: (FETCH_TIMEOUT_S + 5) * 1000 }, signal)
  const body = res.stdout
  const report = res.stderr.toString('utf8')
  const at = report.lastIndexOf(META)
  const [statusLine = '', finalUrl = String(url), egress = ''] = at < 0 ? [] : report.slice(at + META.length).split('\n')
  const complaint = (at < 0 ? report : report.slice(0, at)).replace(/curl: \(\d+\) /g, '').trim()
  const status = Number(statusLine.split(' ')[0]) || 0
  const contentType = statusLine.slice(statusLine.indexOf(' ') + 1).trim().toLowerCase()
  if (status === 0 || at < 0) {
    const why = complaint || 'no answer'
    return { output: `Could not fetch ${url}: ${why}. The workspace's network policy decides what can be reached (its domain allowlist, deny rules, and never a loopback or private address).`, isError: true, summary: 'fetch failed' }
  }
  if (egress.trim() === 'refused') {
    return { output: `The workspace's network policy refused ${finalUrl}: ${body.subarray(0, 500).toString('utf8').trim()}`, isError: true, summary: 'refused by the network policy' }
  }
  const cut = body.length > MAX_BYTES
  const bytes = cut ? body.subarray(0, MAX_BYTES) : body
  const isHtml = contentType.includes('html') || (!contentType && /^\s*</.test(bytes.subarray(0, 200).toString('utf8')))
  const isText = isHtml || contentType.startsWith('text/') || /json|xml|javascript|yaml|csv/.test(contentType)
  if (!isText) return { output: `${finalUrl} answered ${status} with ${contentType || 'an unknown type'} (${body.length} bytes), which is not text; nothing to read.`, isError: false, summary: `${status} · ${contentType || 'binary'}` }
  let text = isHtml ? htmlToMarkdown(bytes.toString('utf8')) : bytes.toString('utf8')
  let note = ''
  if (text.length > maxChars) {
    note = `\n\n[Cut at ${maxChars} of ${text.length} characters. Ask again with a larger max_chars (at most 200000) for more.]`
    text = text.slice(0, maxChars)
  } else if (cut) note = `\n\n[Only the first ${MAX_BYTES} bytes of the page were read.]`
  const header = `${finalUrl} (${status}${contentType ? `, ${contentType.split(';')[0]}` : ''})${finalUrl !== url ? `, redirected from ${url}` : ''}\n\n`
  return { output: header + text + note, isError: status >= 400, summary: `${status} · ${text.length} characters${note ? ' (cut)' : ''}` }
}
