import type { Page } from 'playwright-core'
import type { ResultPart } from '../result-parts.ts'

const NAV_TIMEOUT_MS = 30_000
const ACT_TIMEOUT_MS = 10_000
const MAX_TEXT = 20_000
const MAX_SNAPSHOT = 40_000

export type BrowserOutcome = {
  output: string
  isError: boolean
  summary: string
  content?: ResultPart[]
}

const cut = (text: string, max: number, what: string) => (text.length > max ? `${text.slice(0, max)}\n[${what} cut at ${max} of ${text.length} characters]` : text)

/** The page as the model reads it: where it is, its text, and its accessibility tree with references to act on. */
async function describePage(page: Page, lead: string): Promise<string> {
  // Settling a little after a change: a page that keeps the network busy is read as it stands.
  await page.waitForLoadState('load', { timeout: 5_000 }).catch(() => {})
  const title = await page.title().catch(() => '')
  const text = await page
    .locator('body')
    .innerText({ timeout: 5_000 })
    .catch(() => '')
  const snapshot = await page.ariaSnapshot({ mode: 'ai', timeout: 10_000 }).catch((err: Error) => `(no accessibility snapshot: ${err.message.split('\n')[0]})`)
  return [
    `${lead}\nPage: ${title || '(untitled)'} — ${page.url()}`,
    `Text:\n${cut(text.trim(), MAX_TEXT, 'text')}`,
    `Accessibility snapshot (act on an element with browser_act and its ref):\n${cut(snapshot, MAX_SNAPSHOT, 'snapshot')}`,
  ].join('\n\n')
}

/** Why a navigation failed, in the words the model needs: the network policy refused it, or the site did. */
function navError(url: string, err: Error): string {
  const first = err.message.split('\n')[0]!.replace(/^page\.goto: /, '')
  if (/ERR_TUNNEL_CONNECTION_FAILED|ERR_PROXY_CONNECTION_FAILED|ERR_NO_SUPPORTED_PROXIES/.test(first)) {
    return `The workspace's network policy refused ${url} (its domain allowlist, deny rules, and never a loopback or private address): ${first}`
  }
  return `Could not open ${url}: ${first}`
}

export async function browse(page: Page, args: Record<string, unknown>): Promise<BrowserOutcome> {
  const url = typeof args.url === 'string' ? args.url : ''
  if (!/^https?:\/\//i.test(url)) return { output: 'browse needs "url", an http(s) address.', isError: true, summary: 'refused: not an http(s) url' }
  let status = 0
  let refusedBody = ''
  try {
    const res = await page.goto(url, { waitUntil: 'domcontentloaded', timeout: NAV_TIMEOUT_MS })
    status = res?.status() ?? 0
    // The egress proxy's own refusal of a plain-http address is an answer, marked as such.
    if (res && (await res.headerValue('x-warren-egress')) === 'refused') refusedBody = (await res.text()).trim()
  } catch (err) {
    return { output: navError(url, err as Error), isError: true, summary: 'navigation failed' }
  }
  if (refusedBody) return { output: `The workspace's network policy refused ${url}: ${refusedBody}`, isError: true, summary: 'refused by the network policy' }
  return { output: await describePage(page, `Opened ${url} (${status}).`), isError: status >= 400, summary: `${status} · ${page.url()}` }
}

const ACTIONS = ['click', 'type', 'select', 'press', 'scroll', 'hover'] as const

export async function browserAct(page: Page, args: Record<string, unknown>): Promise<BrowserOutcome> {
  const action = args.action as (typeof ACTIONS)[number]
  if (!ACTIONS.includes(action)) return { output: `browser_act needs "action", one of ${ACTIONS.join(', ')}.`, isError: true, summary: 'no action' }
  const ref = typeof args.ref === 'string' ? args.ref.replace(/^\[?ref=|\]$/g, '') : ''
  if (!ref && action !== 'scroll' && action !== 'press') return { output: 'browser_act needs "ref", an element reference from the last snapshot (e.g. e12).', isError: true, summary: 'no ref' }
  const target = ref ? page.locator(`aria-ref=${ref}`) : null
  try {
    if (action === 'click') await target!.click({ timeout: ACT_TIMEOUT_MS })
    else if (action === 'hover') await target!.hover({ timeout: ACT_TIMEOUT_MS })
    else if (action === 'type') await target!.fill(String(args.text ?? ''), { timeout: ACT_TIMEOUT_MS })
    else if (action === 'select') await target!.selectOption(String(args.value ?? args.text ?? ''), { timeout: ACT_TIMEOUT_MS })
    else if (action === 'press') await (target ? target.press(String(args.key ?? 'Enter'), { timeout: ACT_TIMEOUT_MS }) : page.keyboard.press(String(args.key ?? 'Enter')))
    else if (target) await target.scrollIntoViewIfNeeded({ timeout: ACT_TIMEOUT_MS })
    else await page.mouse.wheel(0, args.direction === 'up' ? -600 : 600)
  } catch (err) {
    const first = (err as Error).message.split('\n')[0]!
    return { output: `Could not ${action}${ref ? ` ${ref}` : ''}: ${first}. Take a fresh snapshot (browse, or any browser_act) if the page changed.`, isError: true, summary: `${action} failed` }
  }
  return { output: await describePage(page, `Did ${action}${ref ? ` on ${ref}` : ''}.`), isError: false, summary: `${action}${ref ? ` ${ref}` : ''} · ${page.url()}` }
}

export async function screenshot(page: Page, args: Record<string, unknown>): Promise<BrowserOutcome> {
  if (page.url() === 'about:blank') return { output: 'Nothing is open: browse to a page first.', isError: true, summary: 'no page' }
  const png = await page.screenshot({ fullPage: args.full_page === true, timeout: NAV_TIMEOUT_MS })
  const text = `Screenshot of ${page.url()} (${png.length} bytes, PNG${args.full_page === true ? ', the whole page' : ''}).`
  return { output: text, isError: false, summary: `${png.length} bytes`, content: [{ type: 'text', text }, { type: 'file', data: { type: 'data', data: png.toString('base64') }, mediaType: 'image/png' }] }
}

export const BROWSER_ACTIONS = ACTIONS
